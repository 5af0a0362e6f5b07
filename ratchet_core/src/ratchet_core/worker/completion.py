"""Batched success writes.

Job threads hand successful completions to a :class:`CompletionBatcher`; its flusher thread
writes them with ``mark_succeeded_many`` a few milliseconds later, many per round trip. Fencing is
unchanged: every completion carries its claim sequence and the store applies it only to the
claim that is still current; completions the store refuses are reported as stale and never
overwrite anything. Execution records of the same attempts (audit) are written right after, in
the same flush.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

import attrs

from ratchet_api.model import JobType
from ratchet_api.spi.runtime import MetricsCollector
from ratchet_api.store.entities import Completion, ExecutionRecord
from ratchet_api.store.protocols import JobAuditStore, JobStore
from ratchet_core.logs import one_line
from ratchet_core.worker.store_retry import retry_transient, transient_predicate

_log = logging.getLogger("ratchet.worker")

_MAX_FLUSH_TRIES = 5


@attrs.define(slots=True, eq=False)
class PendingCompletion:
    """One success waiting to be written, with what the worker needs afterwards."""

    completion: Completion
    record: ExecutionRecord | None
    token: Any = None
    job_type: JobType = JobType.STANDARD


@attrs.define(slots=True, eq=False)
class PendingFailure:
    """One failed attempt waiting to be written: a retry due at ``run_at`` (fenced
    ``schedule_retry``) or, with ``run_at`` None, the dead letter (fenced
    ``mark_failed_terminal``)."""

    job_id: UUID
    claim_seq: int
    message: str
    run_at: datetime | None
    record: ExecutionRecord | None = None
    token: Any = None
    cause: BaseException | None = None
    """The attempt's exception (for the workflow driver's ``callback_failed`` metric)."""
    plain_message: str | None = None
    """``message`` before sealing (an encrypted job stores it encrypted): what a workflow's
    failure callback receives."""


FailureCallback = Callable[[PendingFailure, "bool | None"], None]
"""Called after each failure write: True applied, False refused (claim superseded), None not
written (the job stays RUNNING for the stale-job sweep)."""


class Completer(Protocol):
    """Writes the outcomes of finished attempts off the job threads, each fenced by its claim
    sequence. ``succeed``/``fail`` never block on the store; ``close`` writes everything
    pending and stops. Thread safe."""

    def succeed(self, item: PendingCompletion) -> None: ...

    def fail(self, item: PendingFailure) -> None: ...

    @property
    def pending(self) -> int: ...

    def close(self, timeout: float = 30.0) -> None: ...


FlushCallback = Callable[[Sequence[PendingCompletion], list[PendingCompletion]], None]
"""Called after each flush with the flushed items and the items whose fenced write applied
(for one job at most one: its latest claim)."""


class CompletionBatcher:
    """Collects completions from many threads and writes them in batches on one thread.

    A flush happens ``interval`` seconds after the first completion of a batch arrived, or at
    once when ``batch_size`` completions are waiting. A transient store failure retries the
    batch with backoff (``success_finalization_retried`` per job once it applied); a batch that
    keeps failing is written job by job, a result the store refuses is dropped
    (``success_finalization_minimal``), and jobs that still cannot be written stay RUNNING
    (``success_finalization_stuck``): the worker stops heartbeating them and the stale-job sweep
    puts them back (the job then runs again: delivery is at least once).
    """

    def __init__(
        self,
        store: JobStore,
        *,
        interval: float,
        batch_size: int,
        on_flushed: FlushCallback,
        metrics: MetricsCollector,
        audit: JobAuditStore | None = None,
        store_name: str = "store",
        on_failure: FailureCallback | None = None,
        start: bool = True,
    ) -> None:
        self._store = store
        self._interval = max(0.0, interval)
        self._batch_size = batch_size
        self._on_flushed = on_flushed
        self._metrics = metrics
        self._audit = audit
        self._store_name = store_name
        self._is_transient = transient_predicate(store)
        self._items: list[PendingCompletion] = []
        self._failures: list[PendingFailure] = []
        self._on_failure = on_failure
        self._cond = threading.Condition()
        self._closed = False
        self._flushing = 0
        self._thread = threading.Thread(
            target=self._run, name="ratchet-completion-flusher", daemon=True
        )
        if start:
            self._thread.start()

    def succeed(self, item: PendingCompletion) -> None:
        with self._cond:
            self._items.append(item)
            size = len(self._items)
            if size == 1 or size >= self._batch_size:
                self._cond.notify()

    add = succeed

    def fail(self, item: PendingFailure) -> None:
        with self._cond:
            self._failures.append(item)
            self._cond.notify()

    @property
    def pending(self) -> int:
        """Outcomes accepted but not yet written (including a batch being written)."""
        with self._cond:
            return len(self._items) + len(self._failures) + self._flushing

    def close(self, timeout: float = 30.0) -> None:
        """Write everything pending and stop the flusher thread."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)
        else:
            self.drain()

    def drain(self) -> None:
        """Write everything pending on the calling thread (a batcher made with
        ``start=False``: tests, or a completer driven by its owner)."""
        with self._cond:
            failures, self._failures = self._failures, []
            items, self._items = self._items, []
        for failure in failures:
            self._write_failure(failure)
        for start in range(0, len(items), self._batch_size):
            self._flush(items[start : start + self._batch_size])

    # ------------------------------------------------------------ flusher thread

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._failures and not self._closed:
                    self._cond.wait()
                if not self._items and not self._failures and self._closed:
                    return
                failures, self._failures = self._failures, []
                self._flushing = len(failures)
            # Failures do not wait for a batch to fill: each is one fenced statement.
            for failure in failures:
                self._write_failure(failure)
            with self._cond:
                self._flushing = 0
                if not self._items:
                    continue
                if len(self._items) < self._batch_size and not self._closed and self._interval:
                    # Let the batch fill for up to `interval` (woken early when it is full).
                    deadline = time.monotonic() + self._interval
                    while len(self._items) < self._batch_size and not self._closed:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        self._cond.wait(remaining)
                batch = self._items[: self._batch_size]
                del self._items[: self._batch_size]
                self._flushing = len(batch)
            try:
                self._flush(batch)
            except Exception:  # noqa: BLE001 - the flusher must survive anything
                _log.exception(
                    "writing %d completions failed; the jobs stay RUNNING for recovery",
                    len(batch),
                )
                self._give_up(batch)
            finally:
                with self._cond:
                    self._flushing = 0

    def _flush(self, batch: list[PendingCompletion]) -> None:
        # Two completions of one job in a batch: the job was recovered as ours and ran again.
        # Only the latest claim can apply; the earlier attempt is superseded, never counted
        # or audited as the success.
        latest: dict[UUID, PendingCompletion] = {}
        for item in batch:
            current = latest.get(item.completion.job_id)
            if current is None or item.completion.claim_seq > current.completion.claim_seq:
                latest[item.completion.job_id] = item
        kept = list(latest.values())
        applied_ids = self._write_batch(kept)
        if applied_ids is None:
            applied_ids = self._write_one_by_one(kept)
        applied = [item for item in kept if item.completion.job_id in applied_ids]
        if self._audit is not None:
            self._save_records(superseded_records(batch, applied))
        self._on_flushed(batch, applied)

    def _write_failure(self, item: PendingFailure) -> None:
        operation = "schedule_retry" if item.run_at is not None else "mark_failed_terminal"
        run_at = item.run_at

        def write() -> bool:
            started = time.perf_counter()
            try:
                if run_at is not None:
                    applied = self._store.schedule_retry(
                        item.job_id, item.claim_seq, run_at, item.message
                    )
                else:
                    applied = self._store.mark_failed_terminal(
                        item.job_id, item.claim_seq, item.message
                    )
            except Exception:
                self._timing(operation, "failure", started)
                raise
            self._timing(operation, "success", started)
            return applied

        applied: bool | None
        try:
            applied = retry_transient(write, is_retryable=self._is_transient)
        except Exception as exc:  # noqa: BLE001 - the job stays RUNNING for recovery
            _log.error(
                "job %s: %s failed (%s); the job stays RUNNING until recovery",
                item.job_id,
                operation,
                one_line(exc),
            )
            applied = None
            self._mark_started({item.job_id: item.claim_seq})
        if self._audit is not None and item.record is not None and applied is not None:
            record = item.record if applied else attrs.evolve(item.record, superseded=True)
            self._save_records([record])
        if self._on_failure is not None:
            try:
                self._on_failure(item, applied)
            except Exception:  # noqa: BLE001 - the flusher must survive anything
                _log.exception("reporting the failure write of job %s failed", item.job_id)

    def _give_up(self, batch: list[PendingCompletion]) -> None:
        """Report ``batch`` as not written, so the worker stops owning (and heartbeating) the
        jobs: recovery then runs them again instead of them staying RUNNING forever."""
        for item in batch:
            self._metrics.success_finalization_stuck(item.completion.job_id, item.job_type)
        self._mark_started({i.completion.job_id: i.completion.claim_seq for i in batch})
        try:
            self._on_flushed(batch, [])
        except Exception:  # noqa: BLE001 - the flusher must survive anything
            _log.exception("reporting %d unwritten completions failed", len(batch))

    def _write_batch(self, kept: list[PendingCompletion]) -> set[UUID] | None:
        """One ``mark_succeeded_many``, retried while its error is transient; the ids it
        applied, or None when it failed for good (then written one by one)."""
        completions = [item.completion for item in kept]
        retried = False

        def write() -> set[UUID]:
            started = time.perf_counter()
            try:
                applied = self._store.mark_succeeded_many(completions)
            except Exception:
                self._timing("mark_succeeded_many", "failure", started)
                raise
            self._timing("mark_succeeded_many", "success", started)
            return applied

        def note_retry(attempt: int, exc: BaseException) -> None:
            nonlocal retried
            retried = True
            _log.info("transient failure writing completions (%s); retrying", one_line(exc))

        try:
            applied = retry_transient(
                write, is_retryable=self._is_transient, tries=_MAX_FLUSH_TRIES, on_retry=note_retry
            )
        except Exception as exc:  # noqa: BLE001 - then job by job
            _log.warning(
                "batched completion write of %d jobs failed (%s); writing them one by one",
                len(completions),
                one_line(exc),
            )
            return None
        if retried:
            for item in kept:
                if item.completion.job_id in applied:
                    self._metrics.success_finalization_retried(
                        item.completion.job_id, item.job_type
                    )
        return applied

    def _write_one_by_one(self, kept: list[PendingCompletion]) -> set[UUID]:
        """The fallback of a failed batch: each success alone; a result the store refuses
        (not a transient error) is dropped and the job marked SUCCEEDED without it (minimal
        finalization); a job that still cannot be written stays RUNNING (stuck): the worker
        stops heartbeating it and the stale-job sweep puts it back."""
        applied: set[UUID] = set()
        for item in kept:
            c = item.completion
            try:
                if self._finalize_one(item):
                    applied.add(c.job_id)
            except Exception as exc:  # noqa: BLE001 - leave the job RUNNING for recovery
                self._metrics.success_finalization_stuck(c.job_id, item.job_type)
                _log.error(
                    "job %s succeeded but its completion cannot be written (%s); it stays "
                    "RUNNING and runs again after the stale-job sweep",
                    c.job_id,
                    one_line(exc),
                )
                self._mark_started({c.job_id: c.claim_seq})
        return applied

    def _mark_started(self, claims: dict[UUID, int]) -> None:
        """Best effort: the started mark of jobs that ran but whose outcome stays unwritten
        (a short job's noted mark is skipped once its outcome is handed over), so that
        recovery charges the attempt they used."""
        try:
            self._store.mark_dispatched(claims)
        except Exception as exc:  # noqa: BLE001 - recovery then gives the attempt back
            _log.debug("started marks of %d unwritten job(s) failed: %s", len(claims), exc)

    def _finalize_one(self, item: PendingCompletion) -> bool:
        c = item.completion
        try:
            return retry_transient(
                lambda: self._store.mark_succeeded(c.job_id, c.claim_seq, c.result),
                is_retryable=self._is_transient,
            )
        except Exception as exc:
            if self._is_transient(exc) or c.result is None:
                raise
            reason = one_line(exc)
        applied = retry_transient(
            lambda: self._store.mark_succeeded(c.job_id, c.claim_seq, None),
            is_retryable=self._is_transient,
        )
        if applied:
            self._metrics.success_finalization_minimal(c.job_id, item.job_type)
            _log.warning(
                "job %s succeeded but its result could not be stored (%s); marked SUCCEEDED "
                "without a result",
                c.job_id,
                reason,
            )
        return applied

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
    "CompletionBatcher",
    "Completer",
    "FailureCallback",
    "FlushCallback",
    "PendingCompletion",
    "PendingFailure",
    "superseded_records",
]
