"""The fair claim contract (``FairClaimStore``): claims interleave the fairness keys of due jobs
of equal priority, so one key's backlog does not starve the others."""

from __future__ import annotations

from datetime import timedelta

from ratchet_api.model import JobPriority
from ratchet_api.store.entities import JobEntity
from ratchet_api.store.protocols import FairClaimStore, WorkerBatchStore
from ratchet_api.store.versions import SPI_1_1
from ratchet_tck.contracts.base import StoreContract
from ratchet_tck.fixture import StoreFixture


def _keys(jobs: list[JobEntity]) -> list[str | None]:
    return [j.fairness_key for j in jobs]


class FairClaimStoreContract(StoreContract):
    """Round robin across fairness keys among due jobs of equal priority (rank within the
    key, plus the key's RUNNING jobs), priority first, unkeyed jobs one group, keys kept as
    written."""

    capability = FairClaimStore
    spi_since = SPI_1_1  # a capability new in store SPI 1.1 (third wave)
    summary = "claims interleave fairness keys (round robin within a priority); keys kept"

    def _backlog(self, fixture: StoreFixture) -> dict[str, list[JobEntity]]:
        """Six jobs of key A due first, then two of B, then two without a key."""
        store = fixture.store()
        base = store.server_now() - timedelta(minutes=10)
        jobs: dict[str, list[JobEntity]] = {"A": [], "B": [], "-": []}
        for i in range(6):
            at = base + timedelta(seconds=i)
            jobs["A"].append(self.insert(fixture, fairness_key="A", scheduled_at=at))
        for i in range(2):
            at = base + timedelta(minutes=1, seconds=i)
            jobs["B"].append(self.insert(fixture, fairness_key="B", scheduled_at=at))
        for i in range(2):
            at = base + timedelta(minutes=2, seconds=i)
            jobs["-"].append(self.insert(fixture, scheduled_at=at))
        return jobs

    def test_fairness_key_is_kept_as_written(self, tck_fixture: StoreFixture) -> None:
        self.cap(tck_fixture, FairClaimStore)
        store = tck_fixture.store()
        key = "tenant-" + "x" * 248  # 255 characters, the longest key
        job = self.insert(tck_fixture, fairness_key=key)
        assert job.fairness_key == key
        assert self.reload(store, job).fairness_key == key
        bulk = [tck_fixture.new_pending_job(fairness_key=f"t{i}") for i in range(3)]
        store.bulk_insert(bulk)
        assert [self.reload(store, j).fairness_key for j in bulk] == ["t0", "t1", "t2"]
        assert self.reload(store, self.insert(tck_fixture)).fairness_key is None

    def test_claim_takes_one_job_of_every_key_before_a_second_of_any(
        self, tck_fixture: StoreFixture
    ) -> None:
        self.cap(tck_fixture, FairClaimStore)
        store = tck_fixture.store()
        jobs = self._backlog(tck_fixture)
        a, b, none = jobs["A"], jobs["B"], jobs["-"]
        claimed = store.claim_next_batch("tck-node", 5)
        # rank 1 of each group by due time, then rank 2 (the unkeyed group has one more)
        assert [j.id for j in claimed] == [a[0].id, b[0].id, none[0].id, a[1].id, b[1].id], _keys(
            claimed
        )

    def test_running_jobs_of_a_key_count_towards_its_rank(self, tck_fixture: StoreFixture) -> None:
        self.cap(tck_fixture, FairClaimStore)
        store = tck_fixture.store()
        jobs = self._backlog(tck_fixture)
        a, b, none = jobs["A"], jobs["B"], jobs["-"]
        first = store.claim_next_batch("tck-node", 1)
        assert [j.id for j in first] == [a[0].id], "the oldest rank-1 job first"
        # A runs one job now: B's first job (rank 1) goes before A's second (rank 1 + 1)
        second = store.claim_next_batch("tck-node", 1)
        assert [j.id for j in second] == [b[0].id], _keys(second)
        third = store.claim_next_batch("tck-node", 1)
        assert [j.id for j in third] == [none[0].id], _keys(third)
        # the unkeyed group counts no running jobs: its second job is rank 1 now
        fourth = store.claim_next_batch("tck-node", 1)
        assert [j.id for j in fourth] == [none[1].id], _keys(fourth)
        # A and B both run one job: their next jobs tie on rank 2, the older (A) first
        fifth = store.claim_next_batch("tck-node", 1)
        assert [j.id for j in fifth] == [a[1].id], _keys(fifth)

    def test_priority_comes_before_fairness(self, tck_fixture: StoreFixture) -> None:
        self.cap(tck_fixture, FairClaimStore)
        store = tck_fixture.store()
        base = store.server_now() - timedelta(minutes=5)
        high = [
            self.insert(
                tck_fixture,
                fairness_key="A",
                priority=JobPriority.HIGH,
                scheduled_at=base + timedelta(seconds=30 + i),
            )
            for i in range(3)
        ]
        normal_b = self.insert(tck_fixture, fairness_key="B", scheduled_at=base)
        claimed = store.claim_next_batch("tck-node", 4)
        assert [j.id for j in claimed] == [*(j.id for j in high), normal_b.id], _keys(claimed)

    def test_unkeyed_jobs_keep_the_plain_order(self, tck_fixture: StoreFixture) -> None:
        self.cap(tck_fixture, FairClaimStore)
        store = tck_fixture.store()
        base = store.server_now() - timedelta(minutes=5)
        jobs = [
            self.insert(tck_fixture, scheduled_at=base + timedelta(seconds=s), priority=p)
            for s, p in ((3, 0), (1, 0), (2, 50), (0, -50), (1, 0))
        ]
        expected = sorted(jobs, key=lambda j: (-int(j.priority), j.scheduled_at, j.id))
        claimed = store.claim_next_batch("tck-node", 5)
        assert [j.id for j in claimed] == [j.id for j in expected]

    def test_claim_and_start_marks_the_first_jobs_in_fair_order(
        self, tck_fixture: StoreFixture
    ) -> None:
        self.cap(tck_fixture, FairClaimStore)
        fast = self.need(tck_fixture, WorkerBatchStore)
        store = tck_fixture.store()
        jobs = self._backlog(tck_fixture)
        claimed = fast.claim_and_start("tck-node", 4, start=2)
        expected = [jobs["A"][0], jobs["B"][0], jobs["-"][0], jobs["A"][1]]
        assert [j.id for j in claimed] == [j.id for j in expected], _keys(claimed)
        marked = [self.reload(store, j).dispatched_at is not None for j in claimed]
        assert marked == [True, True, False, False]


__all__ = ["FairClaimStoreContract"]
