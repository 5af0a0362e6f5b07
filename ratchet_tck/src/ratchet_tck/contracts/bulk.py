"""JobBulkStore contract: bulk insert, orphan recovery, stale detection, dead-letter cleanup."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ratchet_api.errors import StoreDataError
from ratchet_api.ids import uuid7
from ratchet_api.model import JobStatus
from ratchet_api.store.entities import NodeEntity
from ratchet_api.store.versions import SPI_1_0, SPI_1_1
from ratchet_tck.contracts.base import StoreContract, naive, raises_store_data_error
from ratchet_tck.fixture import StoreFixture
from ratchet_tck.versions import spi


class JobBulkStoreContract(StoreContract):
    """Bulk writes are atomic and keep tags; recovery and cleanup touch only what they name."""

    summary = (
        "bulk insert (an integer the store cannot hold refused, never altered), orphan reset, "
        "stale detection, touch, dead-letter deletion"
    )

    def test_bulk_insert_stores_jobs_with_tags(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        jobs = [tck_fixture.new_pending_job(tags=(f"tck-bulk-{i}", "tck-bulk")) for i in range(25)]
        assert store.bulk_insert(jobs) == 25
        for job in jobs:
            found = self.reload(store, job)
            assert sorted(found.tags) == sorted(job.tags)
            assert store.find_tags(job.id) == sorted(job.tags)
        assert store.bulk_insert([]) == 0

    def test_bulk_insert_skips_existing_idempotency_keys(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        existing = self.insert(tck_fixture, idempotency_key="tck-bulk-key")
        dup = tck_fixture.new_pending_job(idempotency_key="tck-bulk-key")
        fresh = tck_fixture.new_pending_job(idempotency_key="tck-bulk-other")
        assert store.bulk_insert([dup, fresh]) == 1
        assert store.find_by_id(dup.id) is None
        assert self.reload(store, fresh).idempotency_key == "tck-bulk-other"
        found = store.find_by_idempotency_key("tck-bulk-key")
        assert found is not None and found.id == existing.id

    def test_bulk_insert_with_one_invalid_job_inserts_nothing(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        good = [tck_fixture.new_pending_job() for _ in range(3)]
        bad = tck_fixture.new_pending_job()
        object.__setattr__(bad, "tags", ("x" * 200,))
        with pytest.raises(StoreDataError):
            store.bulk_insert([*good, bad])
        for job in good:
            assert store.find_by_id(job.id) is None, "bulk_insert must be all or nothing"

    def test_bulk_insert_never_changes_an_integer_it_cannot_hold(
        self, tck_fixture: StoreFixture
    ) -> None:
        """A ``max_retries`` of 2**40 is either refused with ``StoreDataError`` naming the
        field, writing nothing of the batch, or stored as it is: never altered (a 32-bit
        column written by PostgreSQL's binary COPY keeps the low 32 bits: 0)."""
        store = tck_fixture.store()
        good = tck_fixture.new_pending_job()
        big = tck_fixture.new_pending_job(max_retries=2**40)
        try:
            stored = store.bulk_insert([good, big])
        except StoreDataError as exc:
            assert "max_retries" in str(exc)
            assert store.find_by_id(good.id) is None, "bulk_insert must be all or nothing"
            assert store.find_by_id(big.id) is None
        else:
            assert stored == 2
            assert self.reload(store, big).max_retries == 2**40

    @spi(since=SPI_1_1)
    def test_reset_orphan_jobs_of_dead_nodes(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        jobs = [self.insert(tck_fixture) for _ in range(3)]
        a = self.claim_one(store, "tck-dead-1")
        b = self.claim_one(store, "tck-dead-2")
        alive = self.claim_one(store, "tck-alive")
        assert {a.id, b.id, alive.id} == {j.id for j in jobs}
        time.sleep(0.01)
        cutoff = store.server_now() + timedelta(seconds=1)  # every heartbeat so far is older
        assert store.mark_dispatched({a.id: a.claim_seq, b.id: b.claim_seq}) == {a.id, b.id}
        assert store.reset_orphan_jobs(["tck-dead-1", "tck-dead-2", "tck-absent"], cutoff) == 2
        for job in (a, b):
            reset = self.reload(store, job)
            assert (reset.status, reset.owner, reset.attempt) == (JobStatus.PENDING, None, 1)
            assert reset.scheduled_at <= store.server_now()
        assert self.reload(store, alive).owner == "tck-alive"
        assert store.mark_succeeded(a.id, a.claim_seq, "old owner") is False
        assert store.reset_orphan_jobs([], cutoff) == 0

    @spi(until=SPI_1_0)
    def test_reset_orphan_jobs_of_dead_nodes_keeps_the_attempt_counted(
        self, tck_fixture: StoreFixture
    ) -> None:
        """Store SPI 1.0: ``reset_orphan_jobs(node_ids)`` (no cutoff, no started marks) puts
        the RUNNING jobs of the listed nodes back to PENDING due now, owner cleared, attempt
        counted; other nodes keep theirs and the old claim is superseded. 1.1 replaced it
        with the cutoff and the started-mark rule (the test above)."""
        store = tck_fixture.store()
        jobs = [self.insert(tck_fixture) for _ in range(3)]
        a = self.claim_one(store, "tck-dead-1")
        b = self.claim_one(store, "tck-dead-2")
        alive = self.claim_one(store, "tck-alive")
        assert {a.id, b.id, alive.id} == {j.id for j in jobs}
        legacy: Any = store  # the 1.0 signature
        assert legacy.reset_orphan_jobs(["tck-dead-1", "tck-dead-2", "tck-absent"]) == 2
        for job in (a, b):
            reset = self.reload(store, job)
            assert (reset.status, reset.owner, reset.attempt) == (JobStatus.PENDING, None, 1)
            assert reset.scheduled_at <= store.server_now()
        assert self.reload(store, alive).owner == "tck-alive"
        assert store.mark_succeeded(a.id, a.claim_seq, "old owner") is False
        assert legacy.reset_orphan_jobs([]) == 0

    @spi(since=SPI_1_1)
    def test_reset_orphan_jobs_gives_back_the_attempt_of_undispatched_claims(
        self, tck_fixture: StoreFixture
    ) -> None:
        """A dead node's prefetched jobs never ran: their attempt is not charged, so they
        cannot reach the dead letter without a single execution."""
        store = tck_fixture.store()
        self.insert(tck_fixture, max_retries=0)
        self.insert(tck_fixture, max_retries=0)
        ran, queued = store.claim_next_batch("tck-crashed", 2)
        assert store.mark_dispatched({ran.id: ran.claim_seq}) == {ran.id}
        time.sleep(0.01)
        assert store.reset_orphan_jobs(["tck-crashed"], store.server_now() + timedelta(seconds=1))
        after_ran, after_queued = self.reload(store, ran), self.reload(store, queued)
        assert (after_ran.status, after_ran.attempt) == (JobStatus.PENDING, 1), "it may have run"
        assert (after_queued.status, after_queued.attempt) == (JobStatus.PENDING, 0)
        assert after_ran.dispatched_at is None and after_queued.dispatched_at is None

    @spi(since=SPI_1_1)
    def test_reset_orphan_jobs_spares_a_node_that_heartbeat_again(
        self, tck_fixture: StoreFixture
    ) -> None:
        """The recovery race: the node was found inactive, then heartbeat (resumed) before the
        reset; neither its old nor its fresh claims may be taken from it."""
        store = tck_fixture.store()
        self.insert(tck_fixture)
        self.insert(tck_fixture)
        store.upsert_heartbeat(_node("tck-zombie"))
        old = self.claim_one(store, "tck-zombie")
        time.sleep(0.02)
        cutoff = store.server_now()  # "inactive since": taken while the node was silent
        time.sleep(0.02)
        store.upsert_heartbeat(_node("tck-zombie"))  # it resumes...
        fresh = self.claim_one(store, "tck-zombie")  # ...and claims again
        assert store.reset_orphan_jobs(["tck-zombie"], cutoff) == 0
        for job in (old, fresh):
            kept = self.reload(store, job)
            assert (kept.status, kept.owner) == (JobStatus.RUNNING, "tck-zombie")
        assert store.mark_succeeded(fresh.id, fresh.claim_seq, "kept") is True

    @spi(since=SPI_1_1)
    def test_reset_orphan_jobs_spares_jobs_claimed_after_the_cutoff(
        self, tck_fixture: StoreFixture
    ) -> None:
        """A resumed node may claim before its first heartbeat: the job claimed after the cutoff
        stays its own, the job it held while silent is recovered."""
        store = tck_fixture.store()
        self.insert(tck_fixture)
        self.insert(tck_fixture)
        store.upsert_heartbeat(_node("tck-paused"))
        old = self.claim_one(store, "tck-paused")
        time.sleep(0.02)
        cutoff = store.server_now()
        time.sleep(0.02)
        fresh = self.claim_one(store, "tck-paused")  # no heartbeat yet
        assert store.reset_orphan_jobs(["tck-paused"], cutoff) == 1
        assert self.reload(store, old).status is JobStatus.PENDING
        kept = self.reload(store, fresh)
        assert (kept.status, kept.owner, kept.claim_seq) == (
            JobStatus.RUNNING,
            "tck-paused",
            fresh.claim_seq,
        )
        assert store.mark_succeeded(fresh.id, fresh.claim_seq, "kept") is True

    @spi(since=SPI_1_1)
    def test_reset_orphan_jobs_refuses_naive_cutoff(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        with raises_store_data_error("heartbeat_before"):
            store.reset_orphan_jobs(["tck-node"], naive(store.server_now()))

    def test_stale_running_jobs_and_touch(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        self.insert(tck_fixture)
        self.insert(tck_fixture)
        quiet, busy = store.claim_next_batch("tck-node", 2)
        self.insert(tck_fixture)  # PENDING: never stale
        time.sleep(0.25)
        cutoff = store.server_now()
        assert store.touch_running_jobs("tck-node", [busy.id]) == 1
        assert store.touch_running_jobs("tck-other", [quiet.id]) == 0, "not the owner"
        touched = self.reload(store, busy)
        assert touched.heartbeat_at is not None and touched.heartbeat_at >= cutoff
        stale = store.find_stale_running_jobs(cutoff, 10)
        assert [j.id for j in stale] == [quiet.id]
        assert store.find_stale_running_jobs(cutoff - timedelta(hours=1), 10) == []
        assert len(store.find_stale_running_jobs(store.server_now() + timedelta(seconds=1), 1)) == 1

    def test_find_stale_refuses_naive_cutoff(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        with raises_store_data_error("heartbeat_before"):
            store.find_stale_running_jobs(naive(store.server_now()), 10)

    def test_delete_dead_letter_older_than(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        dead = []
        for _ in range(3):
            self.insert(tck_fixture)
            job = self.claim_one(store)
            assert store.mark_failed_terminal(job.id, job.claim_seq, "dead")
            dead.append(job)
        self.insert(tck_fixture)
        ok = self.claim_one(store)
        assert store.mark_succeeded(ok.id, ok.claim_seq, None)
        time.sleep(0.01)
        cutoff = store.server_now()
        self.insert(tck_fixture)
        young = self.claim_one(store)
        assert store.mark_failed_terminal(young.id, young.claim_seq, "young")
        assert store.delete_dead_letter_older_than(cutoff - timedelta(hours=1), 10) == 0
        assert store.delete_dead_letter_older_than(cutoff, 2) == 2
        assert store.delete_dead_letter_older_than(cutoff, 2) == 1
        for job in dead:
            assert store.find_by_id(job.id) is None
            assert store.find_tags(job.id) == []
        assert self.reload(store, ok).status is JobStatus.SUCCEEDED
        assert self.reload(store, young).status is JobStatus.FAILED

    def test_delete_dead_letter_refuses_naive_cutoff(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        with raises_store_data_error("cutoff"):
            store.delete_dead_letter_older_than(naive(store.server_now()), 10)
        assert store.find_by_id(uuid7()) is None


def _node(node_id: str) -> NodeEntity:
    return NodeEntity(node_id=node_id, host="tck-host", pid=1, started_at=datetime.now(UTC))
