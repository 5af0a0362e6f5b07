"""Signal handling of a worker process (``ratchet worker``, ``manage.py ratchet_worker``).

Standard library only, so that a process can install it before anything slow is imported:
``manage.py ratchet_worker`` does so while Django imports its apps (see
``ratchet_core.contrib.django.early``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any, NoReturn

_log = logging.getLogger("ratchet.worker")


def _add_128(signum: int) -> int:
    return 128 + signum


class WorkerSignals:
    """SIGTERM/SIGINT handling of a worker process, installed before anything slow (imports,
    the container, the store), so that no signal ever finds Python's default handlers (a
    process ended by a default SIGTERM reports -15 and gives nothing back).

    The first signal:

    * before the worker starts (``starting``): raises ``SystemExit(0)`` in the main thread:
      nothing was claimed yet, so the process just ends (exit code 0);
    * while :meth:`starting_worker` is open (the worker's own ``start()``): is only recorded,
      and the worker is stopped as soon as ``start()`` returns (no half-started worker);
    * once the worker runs: asks it to stop gracefully (:attr:`stop_requested`; the worker's
      ``request_stop()``), which gives back claimed jobs that did not start and lets running
      ones finish for up to the shutdown timeout.

    A second signal ends the process at once with ``second_exit_code(signum)`` (``ratchet
    worker``: 128 + signal number; ``manage.py ratchet_worker``: 0, as Django's ``db_worker``),
    without waiting for running jobs: their claims are recovered after ``worker.node_timeout``
    like those of a crashed worker. Handlers are installed only in the main thread; the
    previous ones come back with :meth:`uninstall`."""

    def __init__(
        self,
        second_exit_code: Callable[[int], int] = _add_128,
        signals: Sequence[int] = (signal.SIGTERM, signal.SIGINT),
    ) -> None:
        self.second_exit_code = second_exit_code
        self.signals = tuple(signals)
        self.stop_requested = threading.Event()
        self.received: list[int] = []
        self._phase = "starting"
        self._worker: Any = None
        self._previous: dict[int, Any] = {}

    @property
    def installed(self) -> bool:
        return bool(self._previous)

    def install(self) -> WorkerSignals:
        """Install the handlers (main thread only; elsewhere a no-op). Returns self."""
        if threading.current_thread() is threading.main_thread() and not self._previous:
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def uninstall(self) -> None:
        """Give the signals their previous handlers back."""
        previous, self._previous = self._previous, {}
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    @contextlib.contextmanager
    def starting_worker(self, worker: Any) -> Iterator[None]:
        """Around ``worker.start()``: a signal is only recorded meanwhile; afterwards the
        worker is running and a recorded signal has asked it to stop."""
        self._phase = "deferred"
        try:
            yield
        finally:
            self._worker = worker
            self._phase = "running"
            if self.received:
                self._request_stop()

    def stopping(self) -> None:
        """The worker is being stopped: only a second signal still acts (exit at once)."""
        self._phase = "stopping"

    def _request_stop(self) -> None:
        self.stop_requested.set()
        request = getattr(self._worker, "request_stop", None)
        if callable(request):
            request()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        self.received.append(signum)
        if len(self.received) > 1:
            _exit_now(name, self.second_exit_code(signum))
        if self._phase == "starting":
            _log.info("signal %s received before the worker started: exiting", name)
            raise SystemExit(0)
        _log.warning(
            "signal %s received: stopping gracefully (send it again to exit at once)", name
        )
        if self._phase == "running":
            self._request_stop()
        else:  # deferred: acted on when start() returns; stopping: already stopping
            self.stop_requested.set()


def _exit_now(name: str, code: int) -> NoReturn:
    _log.error("signal %s received again: exiting at once without waiting for jobs", name)
    _flush_logging()
    os._exit(code)


def _flush_logging() -> None:
    from ratchet_core.observability.logs import flush_queued_logging

    flush_queued_logging(timeout=1.0)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


__all__ = ["WorkerSignals"]
