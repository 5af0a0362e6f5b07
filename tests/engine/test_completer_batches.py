"""The completer's batched writes besides successes (issue 23): the retries and dead letters of
a flush in one ``WorkerBatchStore.write_failures`` (each still fenced), a failed batch kept
queued without a per-job storm, a batch refused for good written job by job once; and the
noted started marks of running jobs in one ``mark_dispatched`` per flush, dropped for jobs
that finished first. On the TCK memory store, the completer driven by ``drain`` (no thread,
no sleep); the outage is a subclass raising ``TransientStoreError`` (a failure the memory
store cannot produce for real)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from ratchet_api.errors import StoreError, TransientStoreError
from ratchet_api.model import JobStatus
from ratchet_api.store.entities import FailedClaim, JobEntity
from ratchet_core.defaults.metrics import NoOpMetricsCollector
from ratchet_core.worker.completion import CompletionBatcher, PendingCompletion, PendingWrite
from ratchet_core.worker.outcome import OutcomeKind
from ratchet_tck.memory import InMemoryJobStore


class _Counting(InMemoryJobStore):
    """Counts the outcome writes by method; ``write_failures`` raises ``fail_with`` while
    ``failures`` is above zero (each failed call uses one)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()
        self.failures = 0
        self.fail_with: Exception = TransientStoreError("write_failures: connection lost")
        self.marked: list[dict[UUID, int]] = []
        self._batch = threading.local()

    def write_failures(self, failures: Sequence[FailedClaim]) -> set[UUID]:
        self.calls["write_failures"] += 1
        if self.failures > 0:
            self.failures -= 1
            raise self.fail_with
        self._batch.inside = True  # the memory store writes a batch with the per-job methods
        try:
            return super().write_failures(failures)
        finally:
            self._batch.inside = False

    def schedule_retry(self, job_id: UUID, claim_seq: int, run_at: datetime, error: str) -> bool:
        if not getattr(self._batch, "inside", False):
            self.calls["schedule_retry"] += 1
        return super().schedule_retry(job_id, claim_seq, run_at, error)

    def mark_failed_terminal(self, job_id: UUID, claim_seq: int, error: str) -> bool:
        if not getattr(self._batch, "inside", False):
            self.calls["mark_failed_terminal"] += 1
        return super().mark_failed_terminal(job_id, claim_seq, error)

    def mark_dispatched(self, claims: Mapping[UUID, int]) -> set[UUID]:
        self.calls["mark_dispatched"] += 1
        self.marked.append(dict(claims))
        return super().mark_dispatched(claims)


class _Told:
    def __init__(self) -> None:
        self.writes: list[tuple[UUID, bool | None]] = []

    def succeeded(
        self, batch: Sequence[PendingCompletion], applied: Sequence[PendingCompletion]
    ) -> None:
        pass

    def wrote(self, item: PendingWrite, applied: bool | None) -> None:
        self.writes.append((item.job_id, applied))


def _claimed(store: InMemoryJobStore, count: int) -> list[JobEntity]:
    for _ in range(count):
        store.insert_job(JobEntity(target="tests.engine.targets:add"))
    return store.claim_next_batch("node-a", count)


def _completer(store: InMemoryJobStore, told: _Told) -> CompletionBatcher:
    return CompletionBatcher(
        store,
        interval=0,
        batch_size=100,
        metrics=NoOpMetricsCollector(),
        subscribers=[told],
        start=False,  # driven by drain(): no flusher thread
        sleep=lambda seconds: None,  # the retry helper's pauses: nothing to wait for here
    )


def _retry(job: JobEntity, run_at: datetime, claim_seq: int | None = None) -> PendingWrite:
    seq = job.claim_seq if claim_seq is None else claim_seq
    return PendingWrite(job.id, seq, f"OSError: {job.id}", run_at)


def _dead(job: JobEntity) -> PendingWrite:
    return PendingWrite(job.id, job.claim_seq, "ValueError: bad", None)


def test_the_failures_of_a_flush_are_one_fenced_store_call() -> None:
    store = _Counting()
    jobs = _claimed(store, 5)
    told = _Told()
    completer = _completer(store, told)
    later = store.server_now() + timedelta(hours=1)
    requeue = PendingWrite(
        jobs[2].id, jobs[2].claim_seq, "interrupted", later, kind=OutcomeKind.INTERRUPTED_REQUEUE
    )
    stale = _retry(jobs[4], later, claim_seq=jobs[4].claim_seq + 1)  # a claim superseded
    for item in (_retry(jobs[0], later), _dead(jobs[1]), requeue, _dead(jobs[3]), stale):
        completer.write(item)
    completer.drain()
    assert completer.pending == 0
    assert store.calls == Counter({"write_failures": 1}), "one call, no per-job write"
    applied = [(j.id, True) for j in jobs[:4]]
    assert sorted(told.writes) == sorted([*applied, (jobs[4].id, False)])
    statuses = [store.find_by_id(j.id).status for j in jobs]  # type: ignore[union-attr]
    assert statuses == [
        JobStatus.PENDING,
        JobStatus.FAILED,
        JobStatus.PENDING,
        JobStatus.FAILED,
        JobStatus.RUNNING,  # the stale write changed nothing
    ]


def test_an_older_claim_of_a_job_in_the_same_flush_is_superseded() -> None:
    store = _Counting()
    first, other = _claimed(store, 2)
    later = store.server_now() + timedelta(minutes=5)
    # the job was recovered as ours and claimed again while its first attempt's outcome waited
    assert store.release_claim(first.id, first.claim_seq)
    again = next(j for j in store.claim_next_batch("node-a", 5) if j.id == first.id)
    told = _Told()
    completer = _completer(store, told)
    completer.write(_retry(first, later))  # the old claim
    completer.write(_dead(again))
    completer.write(_dead(other))
    completer.drain()
    assert store.calls == Counter({"write_failures": 1})
    assert sorted(told.writes) == sorted([(first.id, False), (again.id, True), (other.id, True)])
    assert store.find_by_id(first.id).status is JobStatus.FAILED  # type: ignore[union-attr]


def test_a_batch_failing_transiently_stays_queued_without_a_per_job_storm() -> None:
    store = _Counting()
    jobs = _claimed(store, 6)
    told = _Told()
    completer = _completer(store, told)
    later = store.server_now() + timedelta(hours=1)
    for job in jobs[:3]:
        completer.write(_retry(job, later))
    for job in jobs[3:]:
        completer.write(_dead(job))
    store.failures = 4  # the retry helper's tries: the store stays down for this flush
    completer.drain()
    assert completer.pending == 6, "every outcome stays queued"
    assert told.writes == []
    assert store.calls == Counter({"write_failures": 4}), "never job by job"
    assert {store.find_by_id(j.id).status for j in jobs} == {JobStatus.RUNNING}  # type: ignore[union-attr]
    store.failures = 1  # one more failure, absorbed by the retry helper: then it answers
    completer.drain()
    assert completer.pending == 0
    assert store.calls == Counter({"write_failures": 6})
    assert sorted(told.writes) == sorted((j.id, True) for j in jobs)


def test_a_batch_refused_for_good_is_written_job_by_job_once() -> None:
    store = _Counting()
    jobs = _claimed(store, 3)
    told = _Told()
    completer = _completer(store, told)
    later = store.server_now() + timedelta(hours=1)
    store.failures = 1
    store.fail_with = StoreError("write_failures: a value the store cannot take")
    completer.write(_retry(jobs[0], later))
    completer.write(_retry(jobs[1], later))
    completer.write(_dead(jobs[2]))
    completer.drain()
    assert store.calls == Counter(
        {"write_failures": 1, "schedule_retry": 2, "mark_failed_terminal": 1}
    )
    assert sorted(told.writes) == sorted((j.id, True) for j in jobs)


def test_a_single_failure_takes_the_per_job_write() -> None:
    store = _Counting()
    (job,) = _claimed(store, 1)
    told = _Told()
    completer = _completer(store, told)
    completer.write(_dead(job))
    completer.drain()
    assert store.calls == Counter({"mark_failed_terminal": 1})
    assert told.writes == [(job.id, True)]


def test_noted_started_marks_go_in_the_next_flush_unless_the_job_finished() -> None:
    store = _Counting()
    running, finished = _claimed(store, 2)
    told = _Told()
    completer = _completer(store, told)
    completer.note_started(running.id, running.claim_seq)
    completer.note_started(finished.id, finished.claim_seq)
    completer.forget_started(finished.id, finished.claim_seq)  # finished before the flush
    completer.forget_started(running.id, running.claim_seq + 1)  # another claim: kept
    completer.drain()
    assert store.marked == [{running.id: running.claim_seq}], "one call, the running job only"
    assert store.find_by_id(running.id).dispatched_at is not None  # type: ignore[union-attr]
    assert store.find_by_id(finished.id).dispatched_at is None  # type: ignore[union-attr]
    completer.drain()
    assert store.calls["mark_dispatched"] == 1, "written once"


def test_a_mark_noted_after_close_is_written_at_once() -> None:
    store = _Counting()
    (job,) = _claimed(store, 1)
    completer = _completer(store, _Told())
    completer.close(timeout=1)
    completer.note_started(job.id, job.claim_seq)
    assert store.marked == [{job.id: job.claim_seq}]


def test_marks_failing_transiently_are_written_at_the_next_flush(caplog: Any) -> None:
    store = _Counting()
    (job,) = _claimed(store, 1)
    completer = _completer(store, _Told())
    original = store.mark_dispatched
    down = {"left": 4}

    def flaky(claims: Mapping[UUID, int]) -> set[UUID]:
        if down["left"] > 0:
            down["left"] -= 1
            raise TransientStoreError("mark_dispatched: connection lost")
        return original(claims)

    store.mark_dispatched = flaky  # type: ignore[method-assign]
    completer.note_started(job.id, job.claim_seq)
    completer.drain()
    assert store.find_by_id(job.id).dispatched_at is None  # type: ignore[union-attr]
    completer.drain()
    assert store.find_by_id(job.id).dispatched_at is not None  # type: ignore[union-attr]
