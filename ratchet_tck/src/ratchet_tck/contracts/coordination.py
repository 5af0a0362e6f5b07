# (capabilities are probed by passing their Protocol class: store.capability(LockStore))
"""Capability contracts of cluster coordination: resource permits, flow control (deferred
claims, rate limits) and lock leases."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

from ratchet_api.model import JobPriority, JobStatus
from ratchet_api.store.protocols import FlowControlStore, LockStore, ResourcePermitStore
from ratchet_api.store.versions import SPI_1_1
from ratchet_tck.contracts.base import StoreContract, assert_same_instant, wait_until
from ratchet_tck.contracts.base_race import race
from ratchet_tck.fixture import StoreFixture, now_ms

LONG = timedelta(minutes=5)
SHORT = timedelta(seconds=1)


class ResourcePermitStoreContract(StoreContract):
    """At most ``limit`` live permits per key, even under concurrency; expired ones free up."""

    capability = ResourcePermitStore
    summary = "limit, re-acquire, release, expiry, 10-thread limit race"

    def test_permits_up_to_the_limit(self, tck_fixture: StoreFixture) -> None:
        permits = self.cap(tck_fixture, ResourcePermitStore)
        assert permits.try_acquire_permit("tck-api", "h1", 2, LONG) is True
        assert permits.try_acquire_permit("tck-api", "h2", 2, LONG) is True
        assert permits.try_acquire_permit("tck-api", "h3", 2, LONG) is False
        assert permits.count_permits("tck-api") == 2
        assert permits.try_acquire_permit("tck-other", "h3", 2, LONG) is True, "keys independent"
        assert permits.count_permits("tck-absent") == 0

    def test_same_holder_reacquires_without_taking_another(self, tck_fixture: StoreFixture) -> None:
        permits = self.cap(tck_fixture, ResourcePermitStore)
        assert permits.try_acquire_permit("tck-api", "h1", 1, LONG)
        assert permits.try_acquire_permit("tck-api", "h1", 1, LONG) is True
        assert permits.count_permits("tck-api") == 1
        assert permits.try_acquire_permit("tck-api", "h2", 1, LONG) is False

    def test_release_frees_a_permit(self, tck_fixture: StoreFixture) -> None:
        permits = self.cap(tck_fixture, ResourcePermitStore)
        assert permits.try_acquire_permit("tck-api", "h1", 1, LONG)
        assert permits.release_permit("tck-api", "h2") is False
        assert permits.try_acquire_permit("tck-api", "h2", 1, LONG) is False
        assert permits.release_permit("tck-api", "h1") is True
        assert permits.count_permits("tck-api") == 0
        assert permits.try_acquire_permit("tck-api", "h2", 1, LONG) is True
        assert permits.release_permit("tck-api", "h1") is False

    def test_expired_permits_do_not_count(self, tck_fixture: StoreFixture) -> None:
        permits = self.cap(tck_fixture, ResourcePermitStore)
        assert permits.try_acquire_permit("tck-api", "crashed", 1, SHORT)
        assert permits.try_acquire_permit("tck-api", "h2", 1, LONG) is False
        wait_until(lambda: permits.count_permits("tck-api") == 0, 5, "the permit to expire")
        assert permits.try_acquire_permit("tck-api", "h2", 1, LONG) is True
        assert permits.count_permits("tck-api") == 1

    def test_concurrent_acquisitions_respect_the_limit(self, tck_fixture: StoreFixture) -> None:
        permits = self.cap(tck_fixture, ResourcePermitStore)
        wins = race(10, lambda i: permits.try_acquire_permit("tck-race", f"h{i}", 3, LONG))
        assert wins.count(True) == 3, f"{wins.count(True)} permits granted for a limit of 3"
        assert permits.count_permits("tck-race") == 3


class LockStoreContract(StoreContract):
    """Every rule of a best-effort lease: atomic acquisition, owner-checked unlock and renew,
    expiry reclaim without the old holder, and expiry on the store's clock."""

    capability = LockStore
    summary = (
        "acquire, owner checks, renew, expiry reclaim, server clock, races,"
        " names compared byte by byte"
    )

    def test_acquire_records_owner_and_expiry_on_store_clock(
        self, tck_fixture: StoreFixture
    ) -> None:
        locks = self.cap(tck_fixture, LockStore)
        store = tck_fixture.store()
        before = store.server_now()
        assert locks.try_lock("tck-lease", "node-a", LONG) is True
        after = store.server_now()
        lease = locks.find_lock("tck-lease")
        assert lease is not None
        assert (lease.name, lease.owner) == ("tck-lease", "node-a")
        slack = timedelta(milliseconds=1)
        assert before - slack <= lease.acquired_at <= after + slack
        assert before + LONG - slack <= lease.expires_at <= after + LONG + slack
        assert locks.find_lock("tck-absent") is None

    def test_live_lease_refuses_another_owner(self, tck_fixture: StoreFixture) -> None:
        locks = self.cap(tck_fixture, LockStore)
        assert locks.try_lock("tck-lease", "node-a", LONG)
        assert locks.try_lock("tck-lease", "node-b", LONG) is False
        lease = locks.find_lock("tck-lease")
        assert lease is not None and lease.owner == "node-a"
        assert locks.try_lock("tck-other", "node-b", LONG) is True, "names are independent"

    def test_names_differing_by_case_or_a_trailing_space_are_distinct_leases(
        self, tck_fixture: StoreFixture
    ) -> None:
        locks = self.cap(tck_fixture, LockStore)
        assert locks.try_lock("tck-Lease", "node-a", LONG)
        assert locks.try_lock("tck-lease", "node-b", LONG) is True, "case is part of the name"
        assert locks.try_lock("tck-lease ", "node-c", LONG) is True, "so is a trailing space"
        leases = {name: locks.find_lock(name) for name in ("tck-Lease", "tck-lease", "tck-lease ")}
        assert {n: lease.owner if lease else None for n, lease in leases.items()} == {
            "tck-Lease": "node-a",
            "tck-lease": "node-b",
            "tck-lease ": "node-c",
        }

    def test_same_owner_reacquires(self, tck_fixture: StoreFixture) -> None:
        locks = self.cap(tck_fixture, LockStore)
        assert locks.try_lock("tck-lease", "node-a", SHORT)
        first = locks.find_lock("tck-lease")
        assert locks.try_lock("tck-lease", "node-a", LONG) is True
        again = locks.find_lock("tck-lease")
        assert first is not None and again is not None
        assert again.owner == "node-a" and again.expires_at > first.expires_at

    def test_unlock_checks_the_owner(self, tck_fixture: StoreFixture) -> None:
        locks = self.cap(tck_fixture, LockStore)
        assert locks.try_lock("tck-lease", "node-a", LONG)
        assert locks.unlock("tck-lease", "node-b") is False
        assert locks.try_lock("tck-lease", "node-b", LONG) is False, "wrong unlock changed it"
        lease = locks.find_lock("tck-lease")
        assert lease is not None and lease.owner == "node-a"
        assert locks.unlock("tck-lease", "node-a") is True
        assert locks.try_lock("tck-lease", "node-b", LONG) is True
        assert locks.unlock("tck-absent", "node-a") is False

    def test_renew_checks_the_owner_and_extends(self, tck_fixture: StoreFixture) -> None:
        locks = self.cap(tck_fixture, LockStore)
        medium = timedelta(seconds=20)  # outlives the four calls before the renewal on any store
        assert locks.try_lock("tck-lease", "node-a", medium)
        short = locks.find_lock("tck-lease")
        assert locks.renew_lock("tck-lease", "node-b", LONG) is False
        unchanged = locks.find_lock("tck-lease")
        assert short is not None and unchanged is not None
        assert (unchanged.owner, unchanged.expires_at) == ("node-a", short.expires_at)
        assert locks.renew_lock("tck-lease", "node-a", LONG) is True
        renewed = locks.find_lock("tck-lease")
        assert renewed is not None and renewed.expires_at >= short.expires_at + LONG - medium * 2
        assert locks.renew_lock("tck-absent", "node-a", LONG) is False

    def test_expired_lease_is_reclaimed_without_the_old_holder(
        self, tck_fixture: StoreFixture
    ) -> None:
        locks = self.cap(tck_fixture, LockStore)
        assert locks.try_lock("tck-lease", "crashed", SHORT)
        assert locks.try_lock("tck-lease", "node-b", LONG) is False
        time.sleep(SHORT.total_seconds() + 0.1)
        assert locks.try_lock("tck-lease", "node-b", LONG) is True
        lease = locks.find_lock("tck-lease")
        assert lease is not None and lease.owner == "node-b"
        assert locks.renew_lock("tck-lease", "crashed", LONG) is False, "old holder lost it"
        assert locks.unlock("tck-lease", "crashed") is False
        still = locks.find_lock("tck-lease")
        assert still is not None and still.owner == "node-b"

    def test_renew_of_an_expired_lease_reports_it_lost(self, tck_fixture: StoreFixture) -> None:
        locks = self.cap(tck_fixture, LockStore)
        assert locks.try_lock("tck-lease", "node-a", SHORT)
        time.sleep(SHORT.total_seconds() + 0.1)
        assert locks.renew_lock("tck-lease", "node-a", LONG) is False

    def test_one_of_many_racing_owners_acquires(self, tck_fixture: StoreFixture) -> None:
        locks = self.cap(tck_fixture, LockStore)
        wins = race(8, lambda i: (i, locks.try_lock("tck-race", f"node-{i}", LONG)))
        winners = [i for i, won in wins if won]
        assert len(winners) == 1, f"{len(winners)} owners acquired one lease"
        lease = locks.find_lock("tck-race")
        assert lease is not None and lease.owner == f"node-{winners[0]}"

    def test_one_of_many_racing_owners_reclaims_an_expired_lease(
        self, tck_fixture: StoreFixture
    ) -> None:
        locks = self.cap(tck_fixture, LockStore)
        assert locks.try_lock("tck-race", "crashed", SHORT)
        time.sleep(SHORT.total_seconds() + 0.1)
        wins = race(8, lambda i: locks.try_lock("tck-race", f"node-{i}", LONG))
        assert wins.count(True) == 1


class FlowControlStoreContract(StoreContract):
    """Deferred claims keep the attempt uncounted; rate-limit buckets never over-grant."""

    capability = FlowControlStore
    spi_since = SPI_1_1  # a capability new in store SPI 1.1
    summary = (
        "deferred claim (fenced, attempt not counted, due later), bucket grants, 8-thread race"
    )

    def test_deferred_claim_is_due_later_and_not_counted(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        flow = self.cap(tck_fixture, FlowControlStore)
        job = self.insert(tck_fixture, priority=JobPriority.CRITICAL)
        claimed = self.claim_one(store)
        assert claimed.id == job.id and claimed.attempt == 1
        later = now_ms() + timedelta(minutes=10)
        assert flow.defer_claim(job.id, claimed.claim_seq + 1, later) is False, "stale claim"
        assert flow.defer_claim(job.id, claimed.claim_seq, later) is True
        back = self.reload(store, job)
        assert (back.status, back.attempt, back.owner) == (JobStatus.PENDING, 0, None)
        assert_same_instant(back.scheduled_at, later, "scheduled_at")
        assert store.claim_next_batch("tck-node", 10) == [], "a deferred job was claimed early"
        assert flow.defer_claim(job.id, claimed.claim_seq, later) is False, "not RUNNING"

    def test_bucket_grants_up_to_its_size_then_says_how_long_to_wait(
        self, tck_fixture: StoreFixture
    ) -> None:
        flow = self.cap(tck_fixture, FlowControlStore)
        key = f"tck-rate-{uuid.uuid4().hex[:12]}"
        per = timedelta(minutes=1)  # refills one token every 20 s: none during the test
        granted = [flow.acquire_rate(key, 3, per) for _ in range(3)]
        assert granted == [timedelta(0)] * 3
        wait = flow.acquire_rate(key, 3, per)
        assert timedelta(seconds=1) < wait <= timedelta(seconds=20), wait
        other = f"tck-rate-{uuid.uuid4().hex[:12]}"
        assert flow.acquire_rate(other, 1, per) == timedelta(0), "buckets are independent"

    def test_bucket_refills_on_the_store_clock(self, tck_fixture: StoreFixture) -> None:
        flow = self.cap(tck_fixture, FlowControlStore)
        key = f"tck-rate-{uuid.uuid4().hex[:12]}"
        per = timedelta(seconds=2)  # the second call comes well within it on any store
        assert flow.acquire_rate(key, 1, per) == timedelta(0)
        assert flow.acquire_rate(key, 1, per) > timedelta(0)
        wait_until(lambda: flow.acquire_rate(key, 1, per) == timedelta(0), 15, "a refill")

    def test_racing_callers_never_get_more_than_the_bucket(self, tck_fixture: StoreFixture) -> None:
        flow = self.cap(tck_fixture, FlowControlStore)
        key = f"tck-rate-{uuid.uuid4().hex[:12]}"
        per = timedelta(hours=1)
        wins = race(8, lambda _: [flow.acquire_rate(key, 5, per) for _ in range(3)])
        granted = sum(1 for calls in wins for wait in calls if wait == timedelta(0))
        assert granted == 5, f"{granted} tokens granted from a bucket of 5"
