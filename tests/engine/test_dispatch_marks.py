"""Started marks (issue 17): the worker writes ``mark_dispatched`` when a job starts, batching
the marks of jobs that start together; a claim the store reports superseded is not run."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from ratchet_api.model import JobStatus
from ratchet_core.worker.dispatch import DispatchMarks
from ratchet_tck.memory import InMemoryJobStore
from tests.engine import targets


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
    store.insert_job(store_job())
    job = store.claim_next_batch("n", 1)[0]
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


def test_a_job_run_by_the_worker_carries_its_started_mark(engine: Any, make_worker: Any) -> None:
    scheduler = engine.scheduler()
    job_id = scheduler.enqueue(targets.add, 1, 2)
    make_worker(engine).run_until_idle(20)
    stored = engine.job_store().find_by_id(job_id)
    assert stored.status is JobStatus.SUCCEEDED
    assert stored.dispatched_at is not None and stored.dispatched_at >= stored.started_at


def store_job() -> Any:
    from ratchet_api.store.entities import JobEntity

    return JobEntity(target="tests.engine.targets:add")
