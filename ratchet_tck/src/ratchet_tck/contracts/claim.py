"""JobClaimStore contract: atomic claims, order, filters, fencing, thread and process races."""

from __future__ import annotations

import multiprocessing
import queue
import threading
from collections import Counter
from datetime import timedelta
from uuid import UUID

import pytest

from ratchet_api.model import MAX_PRIORITY, JobPriority, JobStatus, NodeTagFilter
from ratchet_api.store.entities import JobEntity
from ratchet_api.store.protocols import JobStore
from ratchet_api.store.versions import SPI_1_1
from ratchet_tck._workers import claim_until_empty
from ratchet_tck.contracts.base import StoreContract, assert_same_instant
from ratchet_tck.fixture import StoreFixture
from ratchet_tck.versions import spi

RACE_JOBS = 200
THREADS = 8
PROCESSES = 4


def _insert_many(fixture: StoreFixture, count: int) -> set[UUID]:
    jobs = [fixture.new_pending_job() for _ in range(count)]
    inserted = fixture.store().bulk_insert(jobs)
    assert inserted == count, f"bulk_insert reported {inserted} of {count}"
    return {job.id for job in jobs}


class JobClaimStoreContract(StoreContract):
    """A due job is claimed by exactly one caller, in priority/due-time order, with fencing."""

    summary = "atomic claim, order, filters, claim sequence, 8 threads and 4 processes"

    def test_claim_marks_job_running_for_the_node(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = self.insert(tck_fixture)
        before = store.server_now()
        claimed = self.claim_one(store, "tck-node-a")
        after = store.server_now()
        stored = self.reload(store, job)
        for got in (claimed, stored):
            assert got.id == job.id
            assert got.status is JobStatus.RUNNING
            assert got.owner == "tck-node-a"
            assert got.attempt == 1
            assert got.claim_seq == 1
            assert got.started_at is not None and got.heartbeat_at is not None
            assert before - timedelta(milliseconds=1) <= got.started_at
            assert got.started_at <= after + timedelta(milliseconds=1)
            assert_same_instant(got.heartbeat_at, got.started_at, "heartbeat_at")
            assert list(got.tags) == list(job.tags)

    def test_nothing_due_claims_nothing(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        future = store.server_now() + timedelta(hours=1)
        self.insert(tck_fixture, scheduled_at=future)
        paused = self.insert(tck_fixture)
        assert store.pause_job(paused.id)
        self.insert(tck_fixture, status=JobStatus.WAITING)
        self.insert(tck_fixture, status=JobStatus.AWAITING_SIGNAL)
        assert store.claim_next_batch("tck-node", 10) == []

    def test_a_claimed_job_is_not_claimed_again(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        self.insert(tck_fixture)
        self.claim_one(store, "tck-node-a")
        assert store.claim_next_batch("tck-node-b", 10) == []

    def test_claim_respects_limit(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        ids = _insert_many(tck_fixture, 5)
        first = store.claim_next_batch("tck-node", 3)
        second = store.claim_next_batch("tck-node", 3)
        assert len(first) == 3
        assert len(second) == 2
        assert {j.id for j in first} | {j.id for j in second} == ids
        assert store.claim_next_batch("tck-node", 3) == []

    def test_claim_order_is_priority_then_due_time_then_id(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        base = store.server_now() - timedelta(minutes=5)
        low_old = self.insert(tck_fixture, priority=JobPriority.LOW, scheduled_at=base)
        high_new = self.insert(
            tck_fixture, priority=JobPriority.HIGH, scheduled_at=base + timedelta(seconds=30)
        )
        high_old = self.insert(tck_fixture, priority=JobPriority.HIGH, scheduled_at=base)
        crit = self.insert(
            tck_fixture, priority=JobPriority.CRITICAL, scheduled_at=base + timedelta(minutes=1)
        )
        normal = self.insert(tck_fixture, priority=JobPriority.NORMAL, scheduled_at=base)
        tie_a = self.insert(tck_fixture, priority=JobPriority.LOW, scheduled_at=base)
        expected = [crit.id, high_old.id, high_new.id, normal.id, low_old.id, tie_a.id]
        order = [self.claim_one(store).id for _ in expected]
        assert order == expected
        batch_order = expected  # a single multi-row claim must return the same order
        for job_id in expected:
            store.release_claim(job_id, 1)
        claimed = store.claim_next_batch("tck-node", len(expected))
        assert [j.id for j in claimed] == batch_order

    @spi(since=SPI_1_1)
    def test_integer_priorities_order_claims_exactly(self, tck_fixture: StoreFixture) -> None:
        """Any int of -100..100 is a priority; claims follow the numbers exactly (50 before
        10), not a few levels, and the named points sit among them."""
        store = tck_fixture.store()
        base = store.server_now() - timedelta(minutes=5)
        priorities = [10, -100, 50, JobPriority.NORMAL, 99, -3, MAX_PRIORITY, 49]
        jobs = {p: self.insert(tck_fixture, priority=p, scheduled_at=base) for p in priorities}
        expected = [jobs[p].id for p in sorted(priorities, reverse=True)]
        order = [self.claim_one(store).id for _ in expected]
        assert order == expected
        assert [self.reload(store, jobs[p]).priority for p in (99, -3)] == [99, -3]

    def test_each_claim_increments_claim_seq_and_attempt(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = self.insert(tck_fixture)
        first = self.claim_one(store)
        assert store.schedule_retry(job.id, first.claim_seq, store.server_now(), "boom")
        second = self.claim_one(store)
        assert (second.claim_seq, second.attempt) == (2, 2)
        assert store.mark_succeeded(job.id, first.claim_seq, "stale") is False
        assert self.reload(store, job).status is JobStatus.RUNNING
        assert store.mark_succeeded(job.id, second.claim_seq, '"ok"') is True

    @spi(since=SPI_1_1)
    def test_mark_dispatched_applies_to_current_claims_only(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        self.insert(tck_fixture)
        self.insert(tck_fixture)
        self.insert(tck_fixture)
        a, b = store.claim_next_batch("tck-node", 2)
        assert a.dispatched_at is None and b.dispatched_at is None
        pending = self.insert(tck_fixture, scheduled_at=store.server_now() + timedelta(hours=1))
        missing = tck_fixture.new_pending_job().id
        claims = {a.id: a.claim_seq, b.id: b.claim_seq + 1, pending.id: 0, missing: 1}
        assert store.mark_dispatched(claims) == {a.id}
        marked = self.reload(store, a)
        assert marked.dispatched_at is not None and marked.status is JobStatus.RUNNING
        assert self.reload(store, b).dispatched_at is None, "a stale claim is not marked"
        assert store.mark_dispatched({a.id: a.claim_seq}) == {a.id}, "marking again: current"
        assert_same_instant(
            self.reload(store, a).dispatched_at, marked.dispatched_at, "the first mark stands"
        )
        assert store.mark_dispatched({}) == set()
        # the next claim of the job starts undispatched
        assert store.schedule_retry(a.id, a.claim_seq, store.server_now(), "again")
        again = store.claim_next_batch("tck-node", 3)
        assert [j.dispatched_at for j in again if j.id == a.id] == [None]
        assert self.reload(store, a).dispatched_at is None

    def test_execution_targets_restrict_claims(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        gpu = self.insert(tck_fixture, execution_target="gpu")
        anywhere = self.insert(tck_fixture)
        cpu_claims = store.claim_next_batch("tck-cpu", 10, execution_targets=["cpu"])
        assert [j.id for j in cpu_claims] == [anywhere.id]
        gpu_claims = store.claim_next_batch("tck-gpu", 10, execution_targets=["gpu", "tpu"])
        assert [j.id for j in gpu_claims] == [gpu.id]

    def test_any_node_claims_a_labelled_job_without_target_filter(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        gpu = self.insert(tck_fixture, execution_target="gpu")
        assert [j.id for j in store.claim_next_batch("tck-any", 10)] == [gpu.id]

    def test_tag_filter_requires_and_excludes(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        both = self.insert(tck_fixture, tags=("tck-eu", "tck-fast"))
        only_eu = self.insert(tck_fixture, tags=("tck-eu",))
        slow = self.insert(tck_fixture, tags=("tck-eu", "tck-fast", "tck-slow"))
        flt = NodeTagFilter(
            required=frozenset({"tck-eu", "tck-fast"}), excluded=frozenset({"tck-slow"})
        )
        claimed = store.claim_next_batch("tck-node", 10, tag_filter=flt)
        assert [j.id for j in claimed] == [both.id]
        assert self.reload(store, only_eu).status is JobStatus.PENDING
        assert self.reload(store, slow).status is JobStatus.PENDING

    def test_concurrent_claims_from_threads_claim_each_job_once(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        ids = _insert_many(tck_fixture, RACE_JOBS)
        barrier = threading.Barrier(THREADS)
        claims: list[list[JobEntity]] = [[] for _ in range(THREADS)]
        errors: list[BaseException] = []

        def worker(index: int) -> None:
            try:
                barrier.wait(timeout=30)
                empty = 0
                while empty < 3:
                    got = store.claim_next_batch(f"tck-thread-{index}", 5)
                    claims[index].extend(got)
                    empty = 0 if got else empty + 1
            except BaseException as exc:  # noqa: BLE001 - reported by the assert below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors, f"claim raised in a thread: {errors[0]!r}"
        _assert_each_claimed_once(
            store, ids, {f"tck-thread-{i}": [j.id for j in got] for i, got in enumerate(claims)}
        )

    def test_concurrent_claims_from_processes_claim_each_job_once(
        self, tck_fixture: StoreFixture
    ) -> None:
        factory = tck_fixture.store_factory()
        if factory is None:
            pytest.skip(
                "the fixture's store_factory() is None: a process-local store cannot "
                "be opened from another process"
            )
        store = tck_fixture.store()
        ids = _insert_many(tck_fixture, RACE_JOBS)
        ctx = multiprocessing.get_context("spawn")
        barrier = ctx.Barrier(PROCESSES)
        results = ctx.Queue()
        procs = [
            ctx.Process(target=claim_until_empty, args=(factory, f"tck-proc-{i}", barrier, results))
            for i in range(PROCESSES)
        ]
        for p in procs:
            p.start()
        by_node: dict[str, list[UUID]] = {}
        try:
            for _ in procs:
                node_id, claimed, error = results.get(timeout=120)
                assert not error, f"{node_id} failed: {error}"
                by_node[node_id] = [UUID(i) for i in claimed]
        except queue.Empty:
            pytest.fail("a claiming process did not report within 120 s")
        finally:
            for p in procs:
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()
        _assert_each_claimed_once(store, ids, by_node)


def _assert_each_claimed_once(
    store: JobStore, ids: set[UUID], by_node: dict[str, list[UUID]]
) -> None:
    counts = Counter(job_id for got in by_node.values() for job_id in got)
    doubled = [job_id for job_id, n in counts.items() if n > 1]
    assert not doubled, f"{len(doubled)} jobs were claimed more than once, e.g. {doubled[0]}"
    skipped = ids - set(counts)
    assert not skipped, f"{len(skipped)} due jobs were never claimed"
    assert set(counts) == ids
    for node_id, got in by_node.items():
        for job_id in got[:20]:
            stored = store.find_by_id(job_id)
            assert stored is not None
            assert stored.status is JobStatus.RUNNING
            assert (stored.owner, stored.claim_seq, stored.attempt) == (node_id, 1, 1)
