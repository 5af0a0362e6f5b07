"""The completer: the only writer of the outcomes of jobs the worker ran.

Every outcome (``outcome.py``) of a claimed job is handed to one :class:`CompletionBatcher`:
successes as :class:`PendingCompletion`, every other kind (retry, dead letter, release, defer,
interrupted requeue, superseded) as :class:`PendingWrite`. Its flusher thread writes them in
batches a few milliseconds later: successes with one ``mark_succeeded_many``; retries and dead
letters with one ``write_failures`` where the store has ``WorkerBatchStore`` (else, and for the
other kinds, the store's per-job fenced methods inside the same flush); and the started marks
noted for jobs still running (``note_started``: prefetched jobs that started without a store
call) with one ``mark_dispatched``, dropped for the jobs that finished first. Every write is fenced by its
claim sequence: a write the store refuses (the claim was superseded) never overwrites anything
and is reported as not applied.

Failures of the store:

* a transient error (the store's ``is_transient``, see ``store_retry.py``) is retried by the
  one retry helper a few times; a batch that still fails goes back to the front of the queue and
  is tried again after a growing pause: no job-by-job fallback that would multiply the calls to
  a store that is down;
* the backlog is bounded (``max_pending``): handing over an outcome blocks while it is full,
  and the worker's table of claimed jobs stops claiming before that (``table.py``), so an outage
  slows claiming instead of growing memory;
* a success batch refused with an error that is not transient (an untranslated driver error, a
  result the store cannot take) is written job by job once, to isolate the job at fault; a
  result the store refuses is dropped and the job marked SUCCEEDED without it
  (``success_finalization_minimal``); any other outcome refused that way is given up;
* an outcome given up (the store failed for longer than ``give_up_after``, ``close``'s timeout
  passed, or refused as above) leaves its job RUNNING and no longer heartbeated, for the
  stale-job sweep (``success_finalization_stuck`` for successes): the job runs again (delivery
  is at least once).

After each write the subscribers are told (``OutcomeSubscriber``: the claimed-jobs table,
workflow settling, batch tracking, counters and logs), and the audit records of the written
attempts are saved (``superseded`` when the write was refused).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from uuid import UUID

import attrs

from ratchet_api.spi.runtime import MetricsCollector
from ratchet_api.store.protocols import (
    FlowControlStore,
    JobAuditStore,
    JobStore,
    WorkerBatchStore,
)
from ratchet_core.observability.logs import one_line
from ratchet_core.worker.completion_base import (
    FAILURE_WRITES,
    Callbacks,
    CompleterBase,
    FailureCallback,
    FlushCallback,
    OutcomeSubscriber,
    StoreDown,
    superseded_records,
    take,
)
from ratchet_core.worker.outcome import DeferReason, OutcomeKind
from ratchet_core.worker.pending import PendingCompletion, PendingFailure, PendingWrite
from ratchet_core.worker.store_retry import transient_predicate

_log = logging.getLogger("ratchet.worker")

_FIRST_PAUSE = 0.1
_MAX_PAUSE = 5.0


class CompletionBatcher(CompleterBase):
    """The completer (see the module docstring). ``succeed``/``fail`` return at once unless
    the backlog is full; ``close`` writes everything pending and stops. Thread safe."""

    def __init__(
        self,
        store: JobStore,
        *,
        interval: float,
        batch_size: int,
        metrics: MetricsCollector,
        on_flushed: FlushCallback | None = None,
        audit: JobAuditStore | None = None,
        store_name: str = "store",
        on_failure: FailureCallback | None = None,
        subscribers: Sequence[OutcomeSubscriber] = (),
        max_pending: int | None = None,
        give_up_after: float | None = None,
        start: bool = True,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._store = store
        self._flow = store.capability(FlowControlStore)
        self._fast = store.capability(WorkerBatchStore)
        self._interval = max(0.0, interval)
        self._batch_size = max(1, batch_size)
        self._metrics = metrics
        self._audit = audit
        self._store_name = store_name
        self._is_transient = transient_predicate(store)
        self._subscribers: list[OutcomeSubscriber] = list(subscribers)
        if on_flushed is not None or on_failure is not None:
            self._subscribers.insert(0, Callbacks(on_flushed, on_failure))
        self._max_pending = max_pending
        self._give_up_after = give_up_after
        self._failing_since: float | None = None
        self._sleep = sleep
        self._items: deque[PendingCompletion] = deque()
        self._writes: deque[PendingWrite] = deque()
        self._marks: dict[UUID, int] = {}  # noted started marks of running jobs
        self._cond = threading.Condition()
        self._closed = False
        self._give_up_at: float | None = None
        self._flushing = 0
        self._pause = 0.0
        self._thread = threading.Thread(
            target=self._run, name="ratchet-completion-flusher", daemon=True
        )
        if start:
            self._thread.start()

    # ------------------------------------------------------------ handing over

    def succeed(self, item: PendingCompletion) -> None:
        with self._cond:
            self._wait_for_room()
            self._items.append(item)
            if len(self._items) == 1 or self._queued() >= self._batch_size:
                self._cond.notify_all()

    add = succeed

    def fail(self, item: PendingWrite) -> None:
        """Hand over any outcome but a success (the name is historical)."""
        with self._cond:
            self._wait_for_room()
            self._writes.append(item)
            if len(self._writes) == 1 or self._queued() >= self._batch_size:
                self._cond.notify_all()

    write = fail

    def note_started(self, job_id: UUID, claim_seq: int) -> None:
        """A job started without a store call: its started mark goes in the next batch
        unless :meth:`forget_started` comes first (the job finished). Never blocks."""
        with self._cond:
            closed = self._closed
            if not closed:
                self._marks[job_id] = claim_seq
                if len(self._marks) == 1:
                    # the first mark wakes an idle flusher; one filling a batch takes every
                    # mark with it anyway (a wake-up per started job cost the worker CPU)
                    self._cond.notify_all()
        if closed:  # no flusher any more: written now
            self._mark_started({job_id: claim_seq})

    def forget_started(self, job_id: UUID, claim_seq: int) -> None:
        """The job finished or was given back: its noted mark, if not written yet, is
        dropped (its outcome write is fenced anyway)."""
        with self._cond:
            if self._marks.get(job_id) == claim_seq:
                del self._marks[job_id]

    def _wait_for_room(self) -> None:
        # called with the lock held: backpressure on the job threads while the store is down
        if self._max_pending is None:
            return
        while not self._closed and self._pending() >= self._max_pending:
            self._cond.wait(1.0)

    @property
    def pending(self) -> int:
        """Outcomes accepted but not yet written (including a batch being written)."""
        with self._cond:
            return self._pending()

    def _queued(self) -> int:
        return len(self._items) + len(self._writes)

    def _pending(self) -> int:
        return len(self._items) + len(self._writes) + self._flushing

    def close(self, timeout: float = 30.0) -> None:
        """Write everything pending (for up to ``timeout`` seconds while the store fails; what
        is still unwritten then is given up) and stop the flusher thread."""
        with self._cond:
            self._closed = True
            self._give_up_at = time.monotonic() + timeout
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout + 5.0)
        else:
            self.drain()

    def drain(self) -> None:
        """Write everything pending on the calling thread, once (a batcher made with
        ``start=False``: tests, or a completer driven by its owner); what fails transiently
        stays queued."""
        with self._cond:
            writes, self._writes = list(self._writes), deque()
            items, self._items = list(self._items), deque()
            marks, self._marks = self._marks, {}
        self._write_marks(marks)
        for start in range(0, max(len(writes), len(items)), self._batch_size):
            self._flush(
                writes[start : start + self._batch_size], items[start : start + self._batch_size]
            )

    # ------------------------------------------------------------ flusher thread

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._writes and not self._marks and not self._closed:
                    self._cond.wait()
                if not self._items and not self._writes and not self._marks:
                    return  # closed and nothing left
                if self._pause and not self._closed:
                    # the store failed: wait out the pause (new outcomes do not cut it
                    # short, close() does)
                    until = time.monotonic() + self._pause
                    while not self._closed and (remaining := until - time.monotonic()) > 0:
                        self._cond.wait(remaining)
                elif self._queued() < self._batch_size and not self._closed and self._interval:
                    # let the batch fill for up to `interval` (woken when it is full): the
                    # failures of a flush go in one write too (WorkerBatchStore)
                    deadline = time.monotonic() + self._interval
                    while self._queued() < self._batch_size and not self._closed:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        self._cond.wait(remaining)
                writes = take(self._writes, self._batch_size)
                items = take(self._items, self._batch_size)
                marks, self._marks = self._marks, {}
                self._flushing = len(writes) + len(items)
            settled: set[int] = set()
            try:
                self._write_marks(marks)
                self._flush(writes, items, settled)
            except Exception:  # noqa: BLE001 - the flusher must survive anything
                _log.exception("writing %d outcomes failed", len(writes) + len(items))
                # give up only what the flush had not told (or queued again) yet: a written
                # outcome told twice would leave the claimed-jobs table twice
                self._give_up(
                    [w for w in writes if id(w) not in settled],
                    [i for i in items if id(i) not in settled],
                )
            finally:
                with self._cond:
                    self._flushing = 0
                    self._cond.notify_all()

    def _flush(
        self,
        writes: list[PendingWrite],
        items: list[PendingCompletion],
        settled: set[int] | None = None,
    ) -> None:
        """One flush: retries and dead letters in one batch (``WorkerBatchStore``), the other
        writes one by one, then the successes in one batch. What fails transiently goes back
        to the front of the queue (or is given up once ``close``'s time is over). ``settled``
        collects the ``id()`` of each outcome told to the subscribers or queued again, for the
        flusher's catch-all."""
        if settled is None:
            settled = set()
        left_writes: list[PendingWrite] = []
        left_items: list[PendingCompletion] = []
        batched = [w for w in writes if w.kind in FAILURE_WRITES] if self._fast else []
        if len(batched) > 1:
            try:
                self._write_failures(batched, settled)
            except StoreDown:
                left_writes, writes = writes, []  # the store is down: all of them wait
            else:  # the rest, and those a refused batch left to the per-job path
                writes = [w for w in writes if id(w) not in settled]
        for index, write in enumerate(writes):
            try:
                self._write_one(write)
            except StoreDown:
                left_writes = writes[index:]
                break
            settled.add(id(write))
        if items and left_writes:
            left_items = items  # the store is down: do not try the batch now
        elif items:
            try:
                self._write_successes(items)
            except StoreDown:
                left_items = items
            else:
                settled.update(id(item) for item in items)
        if not (left_writes or left_items):
            self._pause = 0.0
            self._failing_since = None
            return
        self._pause = min(_MAX_PAUSE, max(_FIRST_PAUSE, self._pause * 2))
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        with self._cond:
            expired = (self._give_up_at is not None and now >= self._give_up_at) or (
                self._give_up_after is not None and now - self._failing_since >= self._give_up_after
            )
            if not expired:
                self._writes.extendleft(reversed(left_writes))
                self._items.extendleft(reversed(left_items))
                settled.update(id(item) for item in (*left_writes, *left_items))
                # queued again, no longer being written: counted once in `pending`
                self._flushing = max(0, self._flushing - len(left_writes) - len(left_items))
                self._cond.notify_all()
        if expired:
            settled.update(id(item) for item in (*left_writes, *left_items))
            self._give_up(left_writes, left_items)
        else:
            _log.warning(
                "writing %d outcomes failed with a transient store error; they stay queued "
                "and are written again in %.1fs",
                len(left_writes) + len(left_items),
                self._pause,
            )

    # ------------------------------------------------------------ other outcomes

    def _write_one(self, item: PendingWrite) -> None:
        applied: bool | None
        if item.kind is OutcomeKind.SUPERSEDED:
            applied = False
        else:
            try:
                applied = self._call(item.operation, lambda: self._apply(item))
            except StoreDown:
                raise
            except Exception as exc:  # noqa: BLE001 - not transient: given up, left for recovery
                _log.error(
                    "job %s: %s failed (%s); the job stays RUNNING until recovery",
                    item.job_id,
                    item.operation,
                    one_line(exc),
                )
                applied = None
                if item.started:
                    self._mark_started({item.job_id: item.claim_seq})
        if self._audit is not None and item.record is not None and applied is not None:
            record = item.record if applied else attrs.evolve(item.record, superseded=True)
            self._save_records([record])
        self._tell(lambda s: s.wrote(item, applied))

    def _apply(self, item: PendingWrite) -> bool:
        store = self._store
        kind, run_at = item.kind, item.run_at
        if kind is OutcomeKind.DEAD_LETTER:
            return store.mark_failed_terminal(item.job_id, item.claim_seq, item.message or "")
        if kind in (OutcomeKind.RETRY, OutcomeKind.INTERRUPTED_REQUEUE):
            assert run_at is not None
            return store.schedule_retry(item.job_id, item.claim_seq, run_at, item.message or "")
        if kind is OutcomeKind.DEFER and item.defer_reason is DeferReason.FLOW_CONTROL:
            assert run_at is not None
            if self._flow is not None:
                return self._flow.defer_claim(item.job_id, item.claim_seq, run_at)
            return store.release_claim(item.job_id, item.claim_seq)
        if kind is OutcomeKind.DEFER:
            return store.release_claim(item.job_id, item.claim_seq, run_at=run_at)
        return store.release_claim(item.job_id, item.claim_seq)

    # ------------------------------------------------------------ successes

    def _write_successes(self, batch: list[PendingCompletion]) -> None:
        # Two completions of one job in a batch: the job was recovered as ours and ran again.
        # Only the latest claim can apply; the earlier attempt is superseded, never counted
        # or audited as the success.
        latest: dict[UUID, PendingCompletion] = {}
        for item in batch:
            current = latest.get(item.completion.job_id)
            if current is None or item.completion.claim_seq > current.completion.claim_seq:
                latest[item.completion.job_id] = item
        kept = list(latest.values())
        retried = False

        def note_retry(attempt: int, exc: BaseException) -> None:
            nonlocal retried
            retried = True

        completions = [item.completion for item in kept]
        try:
            applied_ids = self._call(
                "mark_succeeded_many",
                lambda: self._store.mark_succeeded_many(completions),
                on_retry=note_retry,
            )
        except StoreDown:
            raise
        except Exception as exc:  # noqa: BLE001 - not transient: find the job at fault
            _log.warning(
                "batched completion write of %d jobs failed (%s); writing them one by one",
                len(completions),
                one_line(exc),
            )
            applied_ids = self._write_one_by_one(kept)
        else:
            if retried:
                for item in kept:
                    if item.completion.job_id in applied_ids:
                        self._metrics.success_finalization_retried(
                            item.completion.job_id, item.job_type
                        )
        applied = [item for item in kept if item.completion.job_id in applied_ids]
        if self._audit is not None:
            self._save_records(superseded_records(batch, applied))
        self._tell(lambda s: s.succeeded(batch, applied))

    def _write_one_by_one(self, kept: list[PendingCompletion]) -> set[UUID]:
        """After a batch refused with an error that is not transient: each success once, no
        retries (a transient error here raises ``StoreDown``: the whole batch waits)."""
        applied: set[UUID] = set()
        for item in kept:
            c = item.completion
            try:
                if self._finalize_one(item):
                    applied.add(c.job_id)
            except StoreDown:
                raise
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

    def _finalize_one(self, item: PendingCompletion) -> bool:
        c = item.completion
        try:
            return bool(
                self._call(
                    "mark_succeeded",
                    lambda: self._store.mark_succeeded(c.job_id, c.claim_seq, c.result),
                    tries=1,
                )
            )
        except StoreDown:
            raise
        except Exception as exc:
            if c.result is None:
                raise
            reason = one_line(exc)
        applied: bool = self._call(
            "mark_succeeded",
            lambda: self._store.mark_succeeded(c.job_id, c.claim_seq, None),
            tries=1,
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

    # ------------------------------------------------------------ shared

    def _give_up(self, writes: Sequence[PendingWrite], items: Sequence[PendingCompletion]) -> None:
        """Report outcomes as not written, so the worker stops owning (and heartbeating) the
        jobs: recovery then runs them again instead of them staying RUNNING forever."""
        claims = {i.job_id: i.claim_seq for i in writes if i.started}
        claims.update({i.completion.job_id: i.completion.claim_seq for i in items})
        if claims:
            self._mark_started(claims)
        for item in items:
            self._metrics.success_finalization_stuck(item.completion.job_id, item.job_type)
        if items:
            _log.error(
                "%d completed jobs could not be written; they stay RUNNING until recovery",
                len(items),
            )
            self._tell(lambda s: s.succeeded(items, []))
        for write in writes:
            _log.error(
                "job %s: %s could not be written; the job stays RUNNING until recovery",
                write.job_id,
                write.operation,
            )
            self._tell(lambda s, w=write: s.wrote(w, None))  # type: ignore[misc]


Completer = CompletionBatcher

__all__ = [
    "CompletionBatcher",
    "Completer",
    "FailureCallback",
    "FlushCallback",
    "OutcomeSubscriber",
    "PendingCompletion",
    "PendingFailure",
    "PendingWrite",
    "superseded_records",
]
