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

import attrs

from ratchet_api.model import JobStatus, JobType
from ratchet_api.spi import MetricsCollector
from ratchet_api.store.entities import JobEntity
from ratchet_api.store.protocols import JobStore
from ratchet_core.features.workflow.meta import has_dependents
from ratchet_core.features.workflow.settle import WorkflowSettler
from ratchet_core.features.workflow.signals import SignalService

_log = logging.getLogger("ratchet.workflow")

ORPHAN_BATCH = 500
THREADS = 4
"""Parents settled at once (each settling is a few store round trips; parents are independent)."""
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
        self._threads: list[threading.Thread] = []
        self._busy = 0
        self._lock = threading.Lock()

    # ------------------------------------------------------------ worker hooks

    def start(self) -> None:
        if not self._threads:
            self._threads = [
                threading.Thread(target=self._run, name=f"ratchet-workflow-{i}", daemon=True)
                for i in range(THREADS)
            ]
            for thread in self._threads:
                thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Settle what was handed over, then stop the threads."""
        threads, self._threads = self._threads, []
        for _ in threads:
            self._queue.put(_STOP)
        for thread in threads:
            thread.join(timeout)

    @property
    def pending(self) -> int:
        """Parents handed over and not settled yet."""
        with self._lock:
            return self._busy

    def succeeded(self, jobs: Iterable[tuple[JobEntity, str | None]]) -> None:
        """Jobs whose success was written, each with its stored result; those with dependents
        are settled."""
        for job, result in jobs:
            if has_dependents(job.workflow):
                self._submit(
                    attrs.evolve(job, status=JobStatus.SUCCEEDED, result=result, owner=None)
                )

    def failed(
        self, job: JobEntity, cause: BaseException, message: str, *, dead_lettered: bool
    ) -> None:
        """A failed attempt whose outcome was written (``dead_lettered``: no retry left;
        ``message``: the stored error)."""
        if job.job_type is JobType.CALLBACK:
            self._metrics.callback_failed(job.id, job.job_type, cause, job.attempt)
        if dead_lettered and has_dependents(job.workflow):
            self._submit(attrs.evolve(job, status=JobStatus.FAILED, last_error=message, owner=None))

    def _submit(self, parent: JobEntity) -> None:
        with self._lock:
            self._busy += 1
        self._queue.put(parent)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            assert isinstance(item, JobEntity)
            try:
                self.settle(item.id, item)
            except Exception:  # noqa: BLE001 - the sweep settles it later
                _log.warning(
                    "settling the children of job %s failed; the maintenance sweep retries",
                    item.id,
                    exc_info=True,
                )
            finally:
                with self._lock:
                    self._busy -= 1

    def settle(self, parent_id: UUID, known: JobEntity | None = None) -> int:
        """Settle the children of one parent now; returns how many moved."""
        outcome = self._settler.settle(parent_id, known)
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
    codec = getattr(w, "_codec", None)  # opens the results, errors and conditions it reads
    settler = WorkflowSettler(
        w._store,
        resolver=w._resolver,
        class_policy=w._class_policy,
        serializer=w._serializer,
        sanitizer=w._sanitizer,
        metrics=w._metrics,
        codec=codec,
    )
    signals = SignalService(w._store, w._serializer, w._metrics, codec)
    driver = WorkflowDriver(w._store, settler, signals, w._metrics, wake)
    driver.start()
    return driver


__all__ = ["WorkflowDriver", "create_driver"]
