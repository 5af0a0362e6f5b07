"""The producer: the claim loop of one worker, on its poller thread.

It claims at most the room the table of claimed jobs gives (``ClaimedJobs.claimable``: free
slots of ``worker.concurrency + worker.prefetch``, none while the completer's backlog is full),
under the poller's circuit breaker (``poller_guard.py``), and hands each claimed job to the
dispatcher. It is woken early by local enqueues and other nodes (:meth:`Producer.request_poll`)
and by freed room, and otherwise waits the ``PollingStrategyProvider``'s adaptive delay; a claim
that filled its whole request is followed by another at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import attrs

from ratchet_api.errors import CircuitBreakerOpenError
from ratchet_api.spi import MetricsCollector, PollingStrategyProvider
from ratchet_api.store.entities import JobEntity
from ratchet_core.observability.logs import one_line
from ratchet_core.worker.execution import ClaimedJob
from ratchet_core.worker.poller_guard import PollerGuard
from ratchet_core.worker.settings import WorkerSettings
from ratchet_core.worker.table import ClaimedJobs

_log = logging.getLogger("ratchet.worker")


@attrs.frozen
class Claim:
    """One claim: the jobs it returned and how many it asked for."""

    jobs: list[JobEntity]
    asked: int


class Producer:
    """Claims jobs into the room of the table (see the module docstring). ``claim(limit)`` is
    the store call; ``accept(job)`` takes each claimed job (already in the table). One thread
    runs :meth:`run`; :meth:`request_poll` and :meth:`stop` are thread safe."""

    def __init__(
        self,
        table: ClaimedJobs,
        claim: Callable[[int], list[JobEntity]],
        guard: PollerGuard,
        batch_size: int,
        *,
        accept: Callable[[ClaimedJob], None] | None = None,
        polling: PollingStrategyProvider | None = None,
        settings: WorkerSettings | None = None,
        metrics: MetricsCollector | None = None,
        node_id: str = "",
        between_polls: Callable[[], None] | None = None,
    ) -> None:
        self.table = table
        self._claim = claim
        self._guard = guard
        self._batch_size = max(1, batch_size)
        self._accept = accept
        self._polling = polling
        self._settings = settings or WorkerSettings()
        self._metrics = metrics
        self._node_id = node_id
        self._between_polls = between_polls
        self.wake = threading.Event()
        self._woken = False
        self._stopping = False
        self._empty_polls = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ control

    @property
    def empty_polls(self) -> int:
        """Polls so far that found no due job."""
        with self._lock:
            return self._empty_polls

    def request_poll(self) -> None:
        """Claim again at once (a local enqueue, another node's hint, released steps)."""
        self._woken = True
        self.wake.set()

    def start(self) -> None:
        self._stopping = False
        self._thread = threading.Thread(target=self.run, name="ratchet-poller", daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> None:
        """Stop claiming; returns once the poller thread ended (or after ``timeout``)."""
        self._stopping = True
        self.wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    # ------------------------------------------------------------ one claim

    def poll_once(self) -> Claim | None:
        """Claim as many jobs as there is room for (at most a batch); None when there is no
        room. The claimed jobs are not in the table yet. Raises what the claim raises
        (``CircuitBreakerOpenError`` while the poller breaker is open)."""
        want = self.table.claimable(self._batch_size)
        if want == 0:
            return None
        jobs = self._guard.claim(lambda: self._claim(want))
        return Claim(jobs, want)

    # ------------------------------------------------------------ the loop

    def run(self) -> None:
        # An unexpected error (a pluggable part's bug) must not end claiming silently while
        # the worker still reports itself running: log it and poll again after a pause.
        while not self._stopping:
            try:
                self._loop()
            except Exception:  # noqa: BLE001 - the poller must survive anything
                _log.exception("worker %s: the poller failed; polling again in 1s", self._node_id)
                if self.wake.wait(1.0):
                    self.wake.clear()

    def _loop(self) -> None:
        assert self._polling is not None and self._accept is not None
        settings = self._settings
        strategy = self._polling.create(settings.polling)
        max_wait = settings.polling.max_interval.total_seconds()
        while not self._stopping:
            open_for = self._guard.open_for()
            if open_for:
                self.wake.wait(min(open_for, max_wait * 5))
                self.wake.clear()
                continue
            self._woken = False
            sent = time.monotonic()  # before the claim: the store stamps it later
            try:
                claim = self.poll_once()
            except CircuitBreakerOpenError:
                continue
            except Exception as exc:  # noqa: BLE001 - the poller must survive store outages
                if self._metrics is not None:
                    self._metrics.claim_transient_failure(type(exc).__name__)
                pause = strategy.next_delay(0, self.table.capacity).total_seconds()
                _log.warning("claiming jobs failed (%s); retrying in %.1fs", one_line(exc), pause)
                self.wake.wait(pause)
                self.wake.clear()
                continue
            if claim is None:  # no room: a finishing job or a written outcome wakes us
                self.wake.wait(max_wait)
                self.wake.clear()
                continue
            if claim.jobs:
                if self._metrics is not None:
                    self._metrics.jobs_claimed(self._node_id, len(claim.jobs))
                jobs = [ClaimedJob(entity, sent) for entity in claim.jobs]
                for job in jobs:
                    self.table.add(job)
                for job in jobs:  # the dispatcher releases a job it fails to accept
                    self._accept(job)
                if len(claim.jobs) == claim.asked:
                    continue  # the queue probably holds more: claim again at once
            else:
                with self._lock:
                    self._empty_polls += 1
            if self._between_polls is not None:
                self._between_polls()
            delay = strategy.next_delay(len(claim.jobs), claim.asked).total_seconds()
            if self._was_woken():
                strategy.reset()
                continue
            if self.wake.wait(delay):
                self.wake.clear()
                if self._was_woken():
                    strategy.reset()

    def _was_woken(self) -> bool:
        # a method, not the attribute: other threads set it while this one waits
        return self._woken


__all__ = ["Claim", "Producer"]
