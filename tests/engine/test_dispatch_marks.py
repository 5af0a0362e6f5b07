"""Started marks (issue 17): the worker writes ``mark_dispatched`` when a job starts, batching
the marks of jobs that start together. A mark is noted (written shortly after the start, not at
all for a job that finished first) while the store cannot have taken the claim back, and checked
before the job runs otherwise; a claim the store reports superseded is not run."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest
from dependency_injector import providers

from ratchet_api.model import JobStatus
from ratchet_api.store.protocols import WorkerBatchStore
from ratchet_core.worker.dispatch import DispatchMarks
from ratchet_tck.memory import InMemoryJobStore
from tests.engine import targets
from tests.engine.conftest import build_container
from tests.engine.worker_fixtures import wait_for


class _CountingStore(InMemoryJobStore):
    """The in-memory store, counting ``mark_dispatched`` calls and holding each one until
    released (so that marks of other threads queue up behind it)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []
        self.entered = threading.Event()
        self.proceed = threading.Event()

    def mark_dispatched(self, claims: Mapping[UUID, int]) -> set[UUID]:
        self.calls.append(len(claims))
        self.entered.set()
        self.proceed.wait(5)
        return super().mark_dispatched(claims)


class _PlainClaims(InMemoryJobStore):
    """The in-memory store without ``WorkerBatchStore`` (the engine's fallback path)."""

    def capability(self, kind: Any) -> Any:
        return None if kind is WorkerBatchStore else super().capability(kind)


def test_marks_of_jobs_starting_together_share_one_store_call() -> None:
    store = _CountingStore()
    for _ in range(8):
        store.insert_job(store_job())
    claimed = store.claim_next_batch("n", 8)
    marks = DispatchMarks(store)
    answers: dict[UUID, bool | None] = {}

    def start(job: Any) -> None:
        answers[job.id] = marks.mark(job.id, job.claim_seq)

    first = threading.Thread(target=start, args=(claimed[0],))
    first.start()
    assert store.entered.wait(5)
    others = [threading.Thread(target=start, args=(job,)) for job in claimed[1:]]
    for thread in others:
        thread.start()
    deadline = time.monotonic() + 5
    while len(marks._queued) < len(others) and time.monotonic() < deadline:
        time.sleep(0.005)  # every other start is queued behind the running store call
    store.proceed.set()
    for thread in [first, *others]:
        thread.join(5)
    assert answers == {job.id: True for job in claimed}
    assert store.calls[0] == 1 and sum(store.calls) == 8
    assert store.calls == [1, 7], f"{store.calls}: the queued marks were not batched"
    assert all(store.find_by_id(job.id).dispatched_at is not None for job in claimed)


def test_a_superseded_claim_is_reported_and_a_store_error_is_unknown() -> None:
    store = InMemoryJobStore()
    job = claimed_job(store)
    assert store.release_claim(job.id, job.claim_seq)
    marks = DispatchMarks(store)
    assert marks.mark(job.id, job.claim_seq) is False
    store.close()

    class Broken(InMemoryJobStore):
        def mark_dispatched(self, claims: Mapping[UUID, int]) -> set[UUID]:
            raise RuntimeError("store down")

    assert DispatchMarks(Broken()).mark(job.id, 1) is None


def test_a_job_queued_under_an_old_and_a_new_claim_answers_both_and_runs_once() -> None:
    """The node claimed a job again while an older claim of it was still held: both starts
    queue behind a running store call; the newer claim is marked, the older is superseded, and
    neither thread is left waiting."""
    store = _CountingStore()
    store.insert_job(store_job())
    blocker = store.insert_job(store_job())
    first_claims = {j.id: j for j in store.claim_next_batch("n", 2)}
    old = first_claims.pop(blocker.id, None) and next(iter(first_claims.values()))
    assert old is not None
    assert store.release_claim(old.id, old.claim_seq)
    new = store.claim_next_batch("n", 1)[0]
    assert new.id == old.id and new.claim_seq > old.claim_seq
    marks = DispatchMarks(store)
    answers: dict[str, bool | None] = {}

    def start(name: str, job_id: UUID, seq: int) -> None:
        answers[name] = marks.mark(job_id, seq)

    lead = threading.Thread(target=start, args=("blocker", blocker.id, 1))
    lead.start()
    assert store.entered.wait(5)
    threads = [
        threading.Thread(target=start, args=("old", old.id, old.claim_seq)),
        threading.Thread(target=start, args=("new", new.id, new.claim_seq)),
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 5
    while sum(len(w) for w in marks._queued.values()) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    store.proceed.set()
    for thread in [lead, *threads]:
        thread.join(5)
        assert not thread.is_alive(), "a start was left waiting for its mark"
    assert answers["old"] is False and answers["new"] is True
    assert store.calls[1] == 1  # one mark for the job: its newest claim


def test_a_noted_mark_is_written_after_the_delay_unless_the_job_finished_first() -> None:
    store = _CountingStore()
    store.proceed.set()
    for _ in range(3):
        store.insert_job(store_job())
    a, b, c = store.claim_next_batch("n", 3)
    marks = DispatchMarks(store, delay=2.0)
    marks.note(a.id, a.claim_seq)
    marks.note(b.id, b.claim_seq)
    marks.note(c.id, c.claim_seq)
    marks.forget(b.id, b.claim_seq)  # b finished within the delay: no mark needed
    assert store.calls == [], "a noted mark was written before its delay"
    wait_for(lambda: store.calls, 10, "the noted marks to be written")
    assert store.calls == [2], "the noted marks were not written together"
    assert store.find_by_id(a.id).dispatched_at is not None
    assert store.find_by_id(c.id).dispatched_at is not None
    assert store.find_by_id(b.id).dispatched_at is None
    marks.close()


def test_a_noted_mark_of_a_superseded_claim_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    store = InMemoryJobStore()
    job = claimed_job(store)
    assert store.cancel_job(job.id)  # cancelled while its job started
    marks = DispatchMarks(store, delay=0.0)
    with caplog.at_level(logging.WARNING, logger="ratchet.worker"):
        marks.note(job.id, job.claim_seq)
        marks.close()
    assert any(
        str(job.id) in r.getMessage() and "outcome will be refused" in r.getMessage()
        for r in caplog.records
    )


def test_close_writes_the_noted_marks_still_pending() -> None:
    store = InMemoryJobStore()
    job = claimed_job(store)
    marks = DispatchMarks(store, delay=60.0)
    marks.note(job.id, job.claim_seq)
    marks.close()
    assert store.find_by_id(job.id).dispatched_at is not None


def test_close_ends_the_writers_pause_and_writes_the_pending_marks() -> None:
    # the writer has already begun waiting out its 60 s delay when close() comes: close must
    # not leave the mark unwritten (it did when the pause was a plain sleep: CI saw it once)
    store = InMemoryJobStore()
    job = claimed_job(store)
    marks = DispatchMarks(store, delay=60.0)
    marks.note(job.id, job.claim_seq)
    time.sleep(0.2)  # lets the writer thread reach its pause; the assertion holds either way
    started = time.monotonic()
    marks.close(timeout=10.0)
    assert store.find_by_id(job.id).dispatched_at is not None
    assert time.monotonic() - started < 5.0


def test_a_noted_mark_that_failed_to_write_is_written_again() -> None:
    class FailingOnce(InMemoryJobStore):
        failures = 1

        def mark_dispatched(self, claims: Mapping[UUID, int]) -> set[UUID]:
            if self.failures:
                self.failures -= 1
                raise RuntimeError("store blip")
            return super().mark_dispatched(claims)

    store = FailingOnce()
    job = claimed_job(store)
    marks = DispatchMarks(store, delay=0.0)
    marks.note(job.id, job.claim_seq)
    wait_for(lambda: store.find_by_id(job.id).dispatched_at, 5, "the mark written again")
    assert store.failures == 0
    marks.close()


def test_a_mark_noted_after_close_is_written_at_once() -> None:
    store = InMemoryJobStore()
    job = claimed_job(store)
    marks = DispatchMarks(store, delay=60.0)
    marks.close()
    marks.note(job.id, job.claim_seq)
    assert store.find_by_id(job.id).dispatched_at is not None


def test_a_long_job_gets_its_started_mark_while_it_runs(
    engine: Any, make_worker: Any, tmp_path: Any
) -> None:
    scheduler = engine.scheduler()
    store = engine.job_store()
    key = f"long-{uuid4()}"
    release = targets.GATES.setdefault(key, threading.Event())
    job_id = scheduler.enqueue(targets.gate, key)
    worker = make_worker(engine)
    worker.start()
    try:
        wait_for(lambda: store.find_by_id(job_id).status is JobStatus.RUNNING, 10, "the start")
        wait_for(lambda: store.find_by_id(job_id).dispatched_at, 10, "the running job's mark")
        assert store.find_by_id(job_id).status is JobStatus.RUNNING  # still held by the gate
    finally:
        release.set()
    assert worker.run_until_idle(10)


def test_a_job_starting_at_once_is_marked_by_its_claim_a_short_prefetched_one_needs_no_mark(
    engine: Any, make_worker: Any
) -> None:
    # one slot and one prefetched job: the claim marks the job that starts at once (no store
    # call of its own); the prefetched job starts later, within the lease, with its mark
    # noted for the completer's next batch, and finishes before that batch
    scheduler = engine.scheduler()
    first = scheduler.enqueue(targets.add, 1, 2)
    second = scheduler.enqueue(targets.add, 3, 4)
    worker = make_worker(engine, concurrency=1, prefetch=1, flush_interval=timedelta(seconds=0.5))
    assert worker.run_until_idle(20)
    store = engine.job_store()
    marked, prefetched = store.find_by_id(first), store.find_by_id(second)
    assert (marked.status, prefetched.status) == (JobStatus.SUCCEEDED, JobStatus.SUCCEEDED)
    assert marked.dispatched_at is not None, "marked by its claim"
    assert marked.dispatched_at == marked.started_at, "in the claim statement itself"
    assert prefetched.dispatched_at is None  # it finished before its noted mark was due


def test_without_worker_batch_store_a_short_job_needs_no_store_call_for_its_mark(
    make_worker: Any,
) -> None:
    # the engine's fallback for a store without WorkerBatchStore: a plain claim, and the
    # noted mark of a job that starts at once, dropped when it finishes first
    store = _PlainClaims()
    engine = build_container("sqlite:///unused.db", **{"cluster.backend": "none"})
    engine.job_store.override(providers.Object(store))
    job_id = engine.scheduler().enqueue(targets.add, 1, 2)
    assert make_worker(engine, flush_interval=timedelta(seconds=0.5)).run_until_idle(20)
    stored = store.find_by_id(job_id)
    assert stored is not None and stored.status is JobStatus.SUCCEEDED
    assert stored.dispatched_at is None


def test_a_job_given_back_uncharged_before_is_checked_before_it_runs(
    engine: Any, make_worker: Any
) -> None:
    """A claim given back without charging the attempt (claim_seq > attempt) may have killed
    its worker before a noted mark: its next start is checked, marked before the job runs."""
    scheduler = engine.scheduler()
    store = engine.job_store()
    job_id = scheduler.enqueue(targets.add, 2, 3)
    ghost = store.claim_next_batch("ghost-node", 1)[0]
    assert store.release_claim(ghost.id, ghost.claim_seq)  # attempt given back
    make_worker(engine, flush_interval=timedelta(seconds=0.5)).run_until_idle(20)
    stored = store.find_by_id(job_id)
    assert stored.status is JobStatus.SUCCEEDED and stored.attempt == 1
    assert stored.dispatched_at is not None


def test_a_claim_cancelled_while_queued_past_half_the_node_timeout_is_not_run(
    engine: Any, make_worker: Any, tmp_path: Any
) -> None:
    """One job thread: the second job waits in the prefetch buffer behind a slow one and is
    cancelled meanwhile; by its start its claim is older than half the node timeout, so its
    mark is checked, the store reports the claim superseded and the job does not run."""
    scheduler = engine.scheduler()
    store = engine.job_store()
    key = f"slow-{uuid4()}"
    release = targets.GATES.setdefault(key, threading.Event())
    slow = scheduler.enqueue(targets.gate, key)
    queued = scheduler.enqueue(targets.record, "mark-queued", 1)
    worker = make_worker(
        engine,
        concurrency=1,
        prefetch=4,
        node_timeout=timedelta(seconds=2),
        heartbeat_interval=timedelta(seconds=0.2),
    )
    worker.start()
    try:
        wait_for(lambda: store.find_by_id(queued).status is JobStatus.RUNNING, 10, "the claim")
        assert store.find_by_id(slow).status is JobStatus.RUNNING
        assert scheduler.cancel(queued)
        time.sleep(1.2)  # the queued claim is now older than half the node timeout
    finally:
        release.set()
    wait_for(lambda: store.find_by_id(slow).status is JobStatus.SUCCEEDED, 10, "the slow job")
    assert worker.run_until_idle(10)
    assert ("mark-queued", 1) not in targets.CALLS
    assert store.find_by_id(queued).status is JobStatus.CANCELLED


def claimed_job(store: InMemoryJobStore) -> Any:
    """A new job in ``store``, claimed by node "n"."""
    store.insert_job(store_job())
    return store.claim_next_batch("n", 1)[0]


def store_job() -> Any:
    from ratchet_api.store.entities import JobEntity

    return JobEntity(target="tests.engine.targets:add")
