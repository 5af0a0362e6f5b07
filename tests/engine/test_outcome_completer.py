"""The completer, the only writer of outcomes, while the store fails (issue 23): a failed batch
goes back to the queue (no job-by-job fallback storm), the backlog is bounded, everything is
written once the store answers again; and the claimed-jobs table stops claiming while the
backlog is full.

The TCK memory store cannot lose a connection, so the outage is a subclass whose outcome
writes raise a transient ``StoreError`` (``TransientStoreError``) while it is "down": the one
failure here that cannot be produced for real."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from dependency_injector import providers

from ratchet_api.errors import TransientStoreError
from ratchet_api.model import JobStatus
from ratchet_api.store.entities import Completion, JobEntity
from ratchet_core.defaults.metrics import NoOpMetricsCollector
from ratchet_core.worker.completion import (
    CompletionBatcher,
    PendingCompletion,
    PendingWrite,
)
from ratchet_core.worker.execution import ClaimedJob, GateKey
from ratchet_core.worker.table import ClaimedJobs
from ratchet_tck.memory import InMemoryJobStore
from tests.engine import targets
from tests.engine.conftest import build_container


class _Outage(InMemoryJobStore):
    """Outcome writes fail transiently while ``failures`` is above zero (each failed call
    uses one); every call is counted by method name."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 0
        self.calls: Counter[str] = Counter()
        self.failed = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._writing_many = threading.local()

    def _maybe_fail(self, name: str) -> None:
        with self._lock:
            self.calls[name] += 1
            if self.failures <= 0:
                return
            self.failures -= 1
        self.failed.release()
        raise TransientStoreError(f"{name}: connection lost")

    def mark_succeeded_many(self, completions: Sequence[Completion]) -> set[UUID]:
        self._maybe_fail("mark_succeeded_many")
        self._writing_many.inside = True  # the memory store writes a batch with mark_succeeded
        try:
            return super().mark_succeeded_many(completions)
        finally:
            self._writing_many.inside = False

    def mark_succeeded(self, job_id: UUID, claim_seq: int, result: str | None) -> bool:
        if not getattr(self._writing_many, "inside", False):
            self._maybe_fail("mark_succeeded")
        return super().mark_succeeded(job_id, claim_seq, result)

    def schedule_retry(self, job_id: UUID, claim_seq: int, run_at: datetime, error: str) -> bool:
        self._maybe_fail("schedule_retry")
        return super().schedule_retry(job_id, claim_seq, run_at, error)


def _claimed(store: InMemoryJobStore, count: int) -> list[JobEntity]:
    container = build_container("sqlite:///unused.db", **{"cluster.backend": "none"})
    with container.job_store.override(providers.Object(store)):
        scheduler = container.scheduler()
        ids = [scheduler.enqueue(targets.add, n, 1) for n in range(count)]
    claimed = {job.id: job for job in store.claim_next_batch("node-a", count)}
    return [claimed[i] for i in ids]


def _success(job: JobEntity) -> PendingCompletion:
    return PendingCompletion(Completion(job_id=job.id, claim_seq=job.claim_seq, result="3"), None)


class _Told:
    """An OutcomeSubscriber that records what it was told."""

    def __init__(self) -> None:
        self.succeeded_ids: list[UUID] = []
        self.writes: list[tuple[UUID, bool | None]] = []
        self.done = threading.Condition()

    def succeeded(
        self, batch: Sequence[PendingCompletion], applied: Sequence[PendingCompletion]
    ) -> None:
        with self.done:
            self.succeeded_ids.extend(i.completion.job_id for i in applied)
            self.done.notify_all()

    def wrote(self, item: PendingWrite, applied: bool | None) -> None:
        with self.done:
            self.writes.append((item.job_id, applied))
            self.done.notify_all()

    def wait_for(self, count: int, timeout: float = 60) -> bool:
        with self.done:
            return self.done.wait_for(
                lambda: len(self.succeeded_ids) + len(self.writes) >= count, timeout
            )


def _completer(store: InMemoryJobStore, told: _Told, **kw: Any) -> CompletionBatcher:
    return CompletionBatcher(
        store,
        interval=0,
        batch_size=kw.pop("batch_size", 100),
        metrics=NoOpMetricsCollector(),
        subscribers=[told],
        sleep=lambda seconds: None,  # the retry helper's pauses: nothing to wait for here
        **kw,
    )


def test_a_failed_batch_goes_back_to_the_queue_without_a_per_job_fallback() -> None:
    store = _Outage()
    jobs = _claimed(store, 10)
    told = _Told()
    completer = _completer(store, told, start=False)
    for job in jobs[:9]:
        completer.succeed(_success(job))
    later = store.server_now() + timedelta(hours=1)
    retry = jobs[9]
    completer.write(PendingWrite(retry.id, retry.claim_seq, "OSError: disk", later))
    store.failures = 4  # the retry helper's tries for the first write: the store stays down
    completer.drain()
    assert completer.pending == 10, "a failed flush must keep every outcome queued"
    assert told.succeeded_ids == [] and told.writes == []
    assert {store.find_by_id(j.id).status for j in jobs} == {JobStatus.RUNNING}  # type: ignore[union-attr]
    # the store is down: the success batch was not even tried, and never job by job
    assert store.calls == Counter({"schedule_retry": 4})
    store.failures = 2  # two more failures, absorbed by the retry helper: then it answers
    completer.drain()
    assert completer.pending == 0
    assert sorted(told.succeeded_ids) == sorted(j.id for j in jobs[:9])
    assert told.writes == [(retry.id, True)]
    assert store.calls["mark_succeeded"] == 0, "no job-by-job fallback"
    assert store.calls["mark_succeeded_many"] == 1
    statuses = [store.find_by_id(j.id).status for j in jobs]  # type: ignore[union-attr]
    assert statuses == [JobStatus.SUCCEEDED] * 9 + [JobStatus.PENDING]


def test_the_backlog_is_bounded_while_the_store_is_down_and_drains_after() -> None:
    store = _Outage()
    jobs = _claimed(store, 12)
    told = _Told()
    store.failures = 10**9
    completer = _completer(store, told, batch_size=3, max_pending=4)
    handed: list[UUID] = []
    handed_four = threading.Event()

    def job_threads() -> None:
        for job in jobs:
            completer.succeed(_success(job))
            handed.append(job.id)
            if len(handed) == 4:
                handed_four.set()

    thread = threading.Thread(target=job_threads, daemon=True)
    thread.start()
    try:
        assert handed_four.wait(30)
        for _ in range(12):  # three flushes of 4 tries each, all failed
            assert store.failed.acquire(timeout=30)
        assert len(handed) == 4, "handing over must block while the backlog is full"
        assert completer.pending == 4
        assert store.calls["mark_succeeded"] == 0
        with store._lock:
            store.failures = 0  # the store is back
        assert told.wait_for(12)
        thread.join(30)
        assert not thread.is_alive()
    finally:
        completer.close(timeout=10)
    assert sorted(told.succeeded_ids) == sorted(j.id for j in jobs)
    assert {store.find_by_id(j.id).status for j in jobs} == {JobStatus.SUCCEEDED}  # type: ignore[union-attr]
    assert store.calls["mark_succeeded"] == 0, "no job-by-job fallback"


def test_a_store_down_for_longer_than_the_give_up_time_leaves_the_jobs_to_recovery() -> None:
    store = _Outage()
    (job,) = _claimed(store, 1)
    told = _Told()
    store.failures = 10**9
    completer = _completer(store, told, give_up_after=0.0)
    try:
        completer.succeed(_success(job))
        with told.done:
            assert told.done.wait_for(lambda: completer.pending == 0, 30)
    finally:
        completer.close(timeout=1)
    assert told.succeeded_ids == []  # reported as not written: the worker disowns the job
    assert store.find_by_id(job.id).status is JobStatus.RUNNING  # type: ignore[union-attr]
    assert store.calls["mark_succeeded"] == 0


def test_a_full_backlog_stops_claiming_until_outcomes_are_written() -> None:
    woken: list[bool] = []
    table = ClaimedJobs(
        concurrency=2,
        prefetch=2,
        backlog=3,
        watermark=1,
        gate_limit=lambda key: 2,
        on_free=lambda: woken.append(True),
    )
    store = InMemoryJobStore()
    entities = _claimed(store, 4)
    jobs = [ClaimedJob(e) for e in entities]
    for job in jobs:
        table.add(job)
    assert table.claimable(100) == 0  # 4 slots, all taken
    for job in jobs[:3]:
        assert table.begin(job)
        handed, following = table.hand_over(job)
        assert handed and following is None
    # three slots free, but three outcomes wait to be written: the backlog is full
    woken.clear()
    assert table.unwritten == 3 and table.claimable(100) == 0
    table.written(jobs[0])
    assert woken == [True]
    assert table.claimable(100) == 3
    assert table.owned_ids() == [j.id for j in entities[1:]]


def test_gates_of_a_label_and_of_an_execution_kind_never_meet() -> None:
    """A user execution target named "sync" has its own gate, not the def jobs' one."""
    from ratchet_api.model import ExecutionKind

    limits = {GateKey.of_kind(ExecutionKind.SYNC): 1, GateKey.of_label("sync"): 1}
    table = ClaimedJobs(
        concurrency=1,
        prefetch=3,
        backlog=10,
        watermark=1,
        gate_limit=lambda key: limits[key],
        on_free=lambda: None,
    )
    store = InMemoryJobStore()
    plain, labelled, waiting = (ClaimedJob(e) for e in _claimed(store, 3))
    plain.gate = GateKey.of_kind(ExecutionKind.SYNC)
    labelled.gate = waiting.gate = GateKey.of_label("sync")
    for job in (plain, labelled, waiting):
        table.add(job)
    assert table.enter_gate(plain) is True
    assert table.enter_gate(labelled) is True  # not blocked by the def job's gate
    assert table.enter_gate(waiting) is False
    assert table.begin(labelled)
    handed, following = table.hand_over(labelled)
    assert handed and following is waiting
