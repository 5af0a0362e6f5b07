"""``WorkflowDriver``: the workflow engine inside a worker.

The worker tells the driver when a job with dependents finished (its success flushed, its dead
letter written); the driver settles the children on its own thread, so neither job threads nor
the completion flusher wait for it, and wakes the worker when steps became due. Nothing is lost
if the process dies before it got there: :meth:`sweep`, run by the worker's maintenance under
the startup lease, settles the children of every terminal parent that still has WAITING children
(``find_orphaned_children``) and expires signals whose timeout passed.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable
from typing import Any
from uuid import UUID

from ratchet_api.model import JobType
from ratchet_api.spi import MetricsCollector
from ratchet_api.store.entities import JobEntity
from ratchet_api.store.protocols import JobStore
from ratchet_core.workflow.meta import has_dependents
from ratchet_core.workflow.settle import WorkflowSettler
from ratchet_core.workflow.signals import SignalService

_log = logging.getLogger("ratchet.workflow")

ORPHAN_BATCH = 500
_STOP = object()


class WorkflowDriver:
    """Settles children of finished parents (see the module docstring). Thread safe."""

    def __init__(
        self,
        store: JobStore,
        settler: WorkflowSettler,
        signals: SignalService,
        metrics: MetricsCollector,
        wake: Callable[[], None],
    ) -> None:
        self._store = store
        self._settler = settler
        self._signals = signals
        self._metrics = metrics
        self._wake = wake
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._busy = 0
        self._lock = threading.Lock()

    # ------------------------------------------------------------ worker hooks

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ratchet-workflow", daemon=True)
            self._thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Settle what was handed over, then stop the thread."""
        thread = self._thread
        if thread is None:
            return
        self._queue.put(_STOP)
        thread.join(timeout)
        self._thread = None

    @property
    def pending(self) -> int:
        """Parents handed over and not settled yet."""
        with self._lock:
            return self._busy

    def succeeded(self, jobs: Iterable[JobEntity]) -> None:
        """Jobs whose success was written; those with dependents are settled."""
        for job in jobs:
            if has_dependents(job.workflow):
                self._submit(job.id)

    def failed(self, job: JobEntity, cause: BaseException, *, dead_lettered: bool) -> None:
        """A failed attempt whose outcome was written (``dead_lettered``: no retry left)."""
        if job.job_type is JobType.CALLBACK:
            self._metrics.callback_failed(job.id, job.job_type, cause, job.attempt)
        if dead_lettered and has_dependents(job.workflow):
            self._submit(job.id)

    def _submit(self, parent_id: UUID) -> None:
        with self._lock:
            self._busy += 1
        self._queue.put(parent_id)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            assert isinstance(item, UUID)
            try:
                self.settle(item)
            except Exception:  # noqa: BLE001 - the sweep settles it later
                _log.warning(
                    "settling the children of job %s failed; the maintenance sweep retries",
                    item,
                    exc_info=True,
                )
            finally:
                with self._lock:
                    self._busy -= 1

    def settle(self, parent_id: UUID) -> int:
        """Settle the children of one parent now; returns how many moved."""
        outcome = self._settler.settle(parent_id)
        if outcome.released:
            self._wake()
        return len(outcome.released) + len(outcome.cancelled)

    # ------------------------------------------------------------ maintenance sweep

    def sweep(self) -> int:
        """Settle the children of terminal or vanished parents (settling lost to a crash or
        done by a path that does not settle, such as an operator's cancel elsewhere) and expire
        timed-out signals. Called under the startup lease; returns how many jobs moved."""
        moved = 0
        for job in self._signals.expire_timed_out():
            if has_dependents(job.workflow):
                moved += self.settle(job.id)
            moved += 1
        parents = dict.fromkeys(
            orphan.parent_id
            for orphan in self._store.find_orphaned_children(ORPHAN_BATCH)
            if orphan.parent_id is not None
        )
        for parent_id in parents:
            assert parent_id is not None
            moved += self.settle(parent_id)
        return moved


def create_driver(worker: Any, wake: Callable[[], None]) -> WorkflowDriver:
    """The driver of a worker, built from the worker's own collaborators, started."""
    w = worker
    settler = WorkflowSettler(
        w._store,
        resolver=w._resolver,
        class_policy=w._class_policy,
        serializer=w._serializer,
        sanitizer=w._sanitizer,
        metrics=w._metrics,
    )
    signals = SignalService(w._store, w._serializer, w._metrics)
    driver = WorkflowDriver(w._store, settler, signals, w._metrics, wake)
    driver.start()
    return driver


__all__ = ["WorkflowDriver", "create_driver"]
