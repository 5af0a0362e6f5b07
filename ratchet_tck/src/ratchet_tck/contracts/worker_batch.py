"""The worker's batched hot writes (``WorkerBatchStore``): a claim that marks the jobs starting
at once, and many fenced failure writes in one call."""

from __future__ import annotations

from datetime import timedelta

from ratchet_api.model import JobPriority, JobStatus
from ratchet_api.store.entities import BatchEntity, BatchStatus, FailedClaim, FailureWrite
from ratchet_api.store.protocols import BatchStore, WorkerBatchStore
from ratchet_api.store.versions import SPI_1_1
from ratchet_tck.contracts.base import StoreContract, assert_same_instant
from ratchet_tck.fixture import StoreFixture


class WorkerBatchStoreContract(StoreContract):
    """Started marks in the claim (first ``start`` in claim order only) and fenced batched
    retry / dead-letter writes (stale ones refused, batches counted, the last write of a job
    wins)."""

    capability = WorkerBatchStore
    spi_since = SPI_1_1  # a capability new in store SPI 1.1 (third wave)
    summary = (
        "claim marking the first `start` jobs started; fenced batched retry/dead-letter writes"
    )

    def test_claim_marks_only_the_first_start_jobs(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        fast = self.cap(tck_fixture, WorkerBatchStore)
        first = self.insert(tck_fixture, priority=JobPriority.CRITICAL)
        second = self.insert(tck_fixture, priority=JobPriority.HIGH)
        third = self.insert(tck_fixture, priority=JobPriority.NORMAL)
        claimed = fast.claim_and_start("tck-node", 3, start=2)
        assert [j.id for j in claimed] == [first.id, second.id, third.id], "claim order"
        for job in claimed:
            assert job.status is JobStatus.RUNNING and job.owner == "tck-node"
            assert (job.attempt, job.claim_seq) == (1, 1)
        for job in claimed[:2]:
            stored = self.reload(store, job)
            assert stored.dispatched_at is not None, "marked started by the claim"
            assert_same_instant(job.dispatched_at, stored.dispatched_at, "returned mark")
            assert_same_instant(stored.dispatched_at, stored.started_at, "the claim's now")
        assert claimed[2].dispatched_at is None
        assert self.reload(store, third).dispatched_at is None, "a prefetched job is unmarked"
        # a later mark of the prefetched job applies; the claim's marks stand
        assert store.mark_dispatched({third.id: claimed[2].claim_seq}) == {third.id}

    def test_marked_claim_counts_its_attempt_on_recovery(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        fast = self.cap(tck_fixture, WorkerBatchStore)
        self.insert(tck_fixture)
        self.insert(tck_fixture)
        started, prefetched = fast.claim_and_start("tck-dead-node", 2, start=1)
        later = store.server_now() + timedelta(seconds=1)
        assert store.reset_orphan_jobs(["tck-dead-node"], later) == 2
        assert self.reload(store, started).attempt == 1, "started: the attempt stays counted"
        assert self.reload(store, prefetched).attempt == 0, "never started: given back"
        # a release unless dispatched refuses a claim the claim itself marked
        again = {j.id: j for j in fast.claim_and_start("tck-node", 2, start=2)}
        job = again[started.id]
        assert store.release_claim(job.id, job.claim_seq, unless_dispatched=True) is False

    def test_start_zero_and_start_beyond_limit(self, tck_fixture: StoreFixture) -> None:
        fast = self.cap(tck_fixture, WorkerBatchStore)
        self.insert(tck_fixture)
        self.insert(tck_fixture)
        self.insert(tck_fixture)
        assert [j.dispatched_at for j in fast.claim_and_start("tck-node", 1, start=0)] == [None]
        every = fast.claim_and_start("tck-node", 5, start=10)
        assert len(every) == 2 and all(j.dispatched_at is not None for j in every)
        assert fast.claim_and_start("tck-node", 5, start=5) == []

    def test_write_failures_fenced_in_one_call(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        fast = self.cap(tck_fixture, WorkerBatchStore)
        for _ in range(4):
            self.insert(tck_fixture)
        a, b, c, d = store.claim_next_batch("tck-node", 4)
        run_at = store.server_now() + timedelta(hours=1)
        stale = FailedClaim(
            job_id=d.id, claim_seq=d.claim_seq + 1, kind=FailureWrite.DEAD_LETTER, error="x"
        )
        applied = fast.write_failures(
            [
                FailedClaim(
                    job_id=a.id,
                    claim_seq=a.claim_seq,
                    kind=FailureWrite.RETRY,
                    error="boom a",
                    run_at=run_at,
                ),
                FailedClaim(
                    job_id=b.id, claim_seq=b.claim_seq, kind=FailureWrite.DEAD_LETTER, error="b"
                ),
                FailedClaim(
                    job_id=c.id,
                    claim_seq=c.claim_seq,
                    kind=FailureWrite.RETRY,
                    error="boom c",
                    run_at=run_at + timedelta(minutes=1),
                ),
                stale,
            ]
        )
        assert applied == {a.id, b.id, c.id}
        got_a, got_b, got_c, got_d = (self.reload(store, j) for j in (a, b, c, d))
        assert (got_a.status, got_a.last_error, got_a.owner) == (JobStatus.PENDING, "boom a", None)
        assert_same_instant(got_a.scheduled_at, run_at, "retry due time")
        assert (got_c.status, got_c.last_error) == (JobStatus.PENDING, "boom c")
        assert_same_instant(got_c.scheduled_at, run_at + timedelta(minutes=1), "own due time")
        assert (got_b.status, got_b.last_error, got_b.owner) == (JobStatus.FAILED, "b", None)
        assert got_b.finished_at is not None
        assert got_d.status is JobStatus.RUNNING and got_d.last_error is None, "stale: unchanged"
        # written again: every claim is stale now
        assert fast.write_failures([stale]) == set()
        assert fast.write_failures([]) == set()

    def test_last_write_of_a_job_wins(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        fast = self.cap(tck_fixture, WorkerBatchStore)
        self.insert(tck_fixture)
        job = self.claim_one(store)
        retry = FailedClaim(
            job_id=job.id,
            claim_seq=job.claim_seq,
            kind=FailureWrite.RETRY,
            error="first",
            run_at=store.server_now(),
        )
        dead = FailedClaim(
            job_id=job.id, claim_seq=job.claim_seq, kind=FailureWrite.DEAD_LETTER, error="last"
        )
        assert fast.write_failures([retry, dead]) == {job.id}
        stored = self.reload(store, job)
        assert (stored.status, stored.last_error) == (JobStatus.FAILED, "last")

    def test_dead_letters_count_in_their_batch(self, tck_fixture: StoreFixture) -> None:
        batches = self.need(tck_fixture, BatchStore)
        fast = self.cap(tck_fixture, WorkerBatchStore)
        batch = BatchEntity(name="tck-failures", status=BatchStatus.SEALED, total=3)
        jobs = [
            tck_fixture.new_pending_job(batch_id=batch.id, priority=JobPriority.CRITICAL)
            for _ in range(3)
        ]
        batches.insert_batch(batch, jobs)
        claimed = tck_fixture.store().claim_next_batch("tck-node", 3)
        assert {j.id for j in claimed} == {j.id for j in jobs}
        run_at = tck_fixture.store().server_now()
        writes = [
            FailedClaim(
                job_id=j.id, claim_seq=j.claim_seq, kind=FailureWrite.DEAD_LETTER, error="dead"
            )
            for j in claimed[:2]
        ] + [
            FailedClaim(
                job_id=claimed[2].id,
                claim_seq=claimed[2].claim_seq,
                kind=FailureWrite.RETRY,
                error="again",
                run_at=run_at,
            )
        ]
        assert len(fast.write_failures(writes)) == 3
        found = batches.find_batch(batch.id)
        assert found is not None
        assert (found.succeeded, found.failed) == (0, 2), "dead letters counted, retries not"


__all__ = ["WorkerBatchStoreContract"]
