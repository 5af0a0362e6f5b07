"""What the completer (``completion.py``) is made of besides its queues and flusher thread: the
subscriber protocol, the one way it calls the store (through the retry helper, timed), and its
batched writes other than successes: retries and dead letters in one
``WorkerBatchStore.write_failures``, and the noted started marks of running jobs in one
``mark_dispatched`` per flush."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol
from uuid import UUID

import attrs

from ratchet_api.spi.runtime import MetricsCollector
from ratchet_api.store.entities import ExecutionRecord, FailedClaim, FailureWrite
from ratchet_api.store.protocols import JobAuditStore, JobStore, WorkerBatchStore
from ratchet_core.observability.logs import one_line
from ratchet_core.worker.outcome import OutcomeKind
from ratchet_core.worker.pending import PendingCompletion, PendingWrite
from ratchet_core.worker.store_retry import retry_transient

_log = logging.getLogger("ratchet.worker")

MAX_FLUSH_TRIES = 4
"""Tries of one write through the retry helper before its batch waits for the next flush."""

FAILURE_WRITES = {
    OutcomeKind.RETRY: FailureWrite.RETRY,
    OutcomeKind.INTERRUPTED_REQUEUE: FailureWrite.RETRY,
    OutcomeKind.DEAD_LETTER: FailureWrite.DEAD_LETTER,
}
"""The outcome kinds ``WorkerBatchStore.write_failures`` writes, and how."""


class OutcomeSubscriber(Protocol):
    """Told about every outcome the completer wrote. Called on the flusher thread; must not
    block on the store for long (hand work to a thread of its own) and should not raise (an
    exception is logged and ignored)."""

    def succeeded(
        self, batch: Sequence[PendingCompletion], applied: Sequence[PendingCompletion]
    ) -> None:
        """Successes written: ``applied`` are those whose fenced write applied (the rest were
        superseded, or given up when ``applied`` is empty after a failure)."""

    def wrote(self, item: PendingWrite, applied: bool | None) -> None:
        """One other outcome: True applied, False refused (claim superseded), None not written
        (the job stays RUNNING for the stale-job sweep)."""


FlushCallback = Callable[[Sequence[PendingCompletion], list[PendingCompletion]], None]
FailureCallback = Callable[[PendingWrite, "bool | None"], None]


@attrs.define
class Callbacks:
    """Subscriber made of two callables."""

    on_flushed: FlushCallback | None
    on_failure: FailureCallback | None

    def succeeded(
        self, batch: Sequence[PendingCompletion], applied: Sequence[PendingCompletion]
    ) -> None:
        if self.on_flushed is not None:
            self.on_flushed(batch, list(applied))

    def wrote(self, item: PendingWrite, applied: bool | None) -> None:
        if self.on_failure is not None:
            self.on_failure(item, applied)


class StoreDown(Exception):
    """A write failed transiently after its retries: the rest of the batch waits."""


class CompleterBase:
    """The completer's store calls and batched writes (``CompletionBatcher`` sets the
    attributes)."""

    _store: JobStore
    _fast: WorkerBatchStore | None
    _audit: JobAuditStore | None
    _metrics: MetricsCollector
    _store_name: str
    _subscribers: list[OutcomeSubscriber]
    _is_transient: Callable[[BaseException], bool]
    _sleep: Callable[[float], None]
    _cond: threading.Condition
    _marks: dict[UUID, int]

    def _write_failures(self, batch: list[PendingWrite], settled: set[int]) -> None:
        """Retries and dead letters with one ``write_failures`` (each fenced). Raises
        ``StoreDown`` (nothing told); refused with an error that is not transient, the
        items are left to the per-job path (nothing added to ``settled``), which isolates
        the write at fault."""
        assert self._fast is not None
        fast = self._fast
        # one write per job: only the newest claim of a job can apply (an older claim of it
        # in the same flush is superseded)
        latest: dict[UUID, PendingWrite] = {}
        for item in batch:
            current = latest.get(item.job_id)
            if current is None or item.claim_seq > current.claim_seq:
                latest[item.job_id] = item
        failures = [
            FailedClaim(
                job_id=item.job_id,
                claim_seq=item.claim_seq,
                kind=FAILURE_WRITES[item.kind],  # type: ignore[index]
                error=item.message or "",
                run_at=item.run_at,
            )
            for item in latest.values()
        ]
        try:
            applied_ids = self._call("write_failures", lambda: fast.write_failures(failures))
        except StoreDown:
            raise
        except Exception as exc:  # noqa: BLE001 - not transient: job by job, once each
            _log.warning(
                "batched failure write of %d jobs failed (%s); writing them one by one",
                len(failures),
                one_line(exc),
            )
            return
        kept = {id(item) for item in latest.values()}
        outcomes = [(item, id(item) in kept and item.job_id in applied_ids) for item in batch]
        if self._audit is not None:
            self._save_records(
                [
                    item.record if applied else attrs.evolve(item.record, superseded=True)
                    for item, applied in outcomes
                    if item.record is not None
                ]
            )
        for item, applied in outcomes:
            settled.add(id(item))
            self._tell(lambda s, i=item, a=applied: s.wrote(i, a))  # type: ignore[misc]

    def _write_marks(self, marks: dict[UUID, int]) -> None:
        """The noted started marks of jobs still running, in one ``mark_dispatched``. A
        transient failure puts them back for the next flush; a claim the store reports
        superseded is logged (the job's outcome will be refused)."""
        if not marks:
            return
        try:
            applied = self._call("mark_dispatched", lambda: self._store.mark_dispatched(marks))
        except Exception as exc:  # noqa: BLE001 - the jobs run on; marked again next flush
            _log.warning("writing the started marks of %d job(s) failed: %s", len(marks), exc)
            if isinstance(exc, StoreDown):
                with self._cond:
                    for job_id, seq in marks.items():
                        self._marks.setdefault(job_id, seq)
            return
        for job_id in marks.keys() - applied:
            _log.warning(
                "job %s was recovered or cancelled while it started: its outcome will be "
                "refused (the claim is no longer current)",
                job_id,
            )

    def _call(
        self,
        operation: str,
        write: Callable[[], Any],
        *,
        tries: int = MAX_FLUSH_TRIES,
        on_retry: Callable[[int, BaseException], None] | None = None,
    ) -> Any:
        """``write()`` through the one retry helper, timed; ``StoreDown`` when it still fails
        transiently."""

        def timed() -> Any:
            started = time.perf_counter()
            try:
                result = write()
            except Exception:
                self._timing(operation, "failure", started)
                raise
            self._timing(operation, "success", started)
            return result

        try:
            return retry_transient(
                timed,
                is_retryable=self._is_transient,
                tries=tries,
                on_retry=on_retry,
                sleep=self._sleep,
            )
        except Exception as exc:
            if self._is_transient(exc):
                raise StoreDown(one_line(exc)) from exc
            raise

    def _tell(self, call: Callable[[OutcomeSubscriber], None]) -> None:
        for subscriber in self._subscribers:
            try:
                call(subscriber)
            except Exception:  # noqa: BLE001 - the flusher must survive anything
                _log.exception("outcome subscriber %r failed", subscriber)

    def _mark_started(self, claims: dict[UUID, int]) -> None:
        """Best effort: the started mark of jobs that ran but whose outcome stays unwritten
        (a short job's noted mark is skipped once its outcome is handed over), so that
        recovery charges the attempt they used."""
        try:
            self._store.mark_dispatched(claims)
        except Exception as exc:  # noqa: BLE001 - recovery then gives the attempt back
            _log.debug("started marks of %d unwritten job(s) failed: %s", len(claims), exc)

    def _save_records(self, records: list[ExecutionRecord]) -> None:
        assert self._audit is not None
        if not records:
            return
        started = time.perf_counter()
        try:
            self._audit.save_executions(records)
        except Exception:  # noqa: BLE001 - audit is best effort; the job outcome is written
            self._timing("save_executions", "failure", started)
            _log.warning("saving %d execution records failed", len(records), exc_info=True)
        else:
            self._timing("save_executions", "success", started)

    def _timing(self, operation: str, outcome: str, started: float) -> None:
        try:
            self._metrics.store_operation(
                self._store_name, operation, outcome, int((time.perf_counter() - started) * 1000)
            )
        except Exception:  # noqa: BLE001 - metrics are best effort
            _log.debug("metrics store_operation failed", exc_info=True)


def take(queue: deque[Any], limit: int) -> list[Any]:
    return [queue.popleft() for _ in range(min(limit, len(queue)))]


def superseded_records(
    batch: Sequence[PendingCompletion], applied: Sequence[PendingCompletion]
) -> list[ExecutionRecord]:
    """The execution records of ``batch``: ``superseded`` unless the item's write applied."""
    written = {id(item) for item in applied}
    return [
        item.record if id(item) in written else attrs.evolve(item.record, superseded=True)
        for item in batch
        if item.record is not None
    ]


__all__ = [
    "FAILURE_WRITES",
    "MAX_FLUSH_TRIES",
    "Callbacks",
    "CompleterBase",
    "FailureCallback",
    "FlushCallback",
    "OutcomeSubscriber",
    "StoreDown",
    "superseded_records",
    "take",
]
