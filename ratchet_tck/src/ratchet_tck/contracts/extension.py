# (capabilities are probed by passing their Protocol class: store.capability(LockStore))
"""JobExtensionStore contract: write-once properties and fenced, versioned state."""

from __future__ import annotations

import pytest

from ratchet_api.errors import JobNotFoundError
from ratchet_api.ids import uuid7
from ratchet_api.model import JobStatus, StateWriteResult, VersionedState
from ratchet_api.store.entities import MAX_KEY_LENGTH
from ratchet_api.store.protocols import JobExtensionStore
from ratchet_tck.contracts.base import StoreContract, raises_store_data_error
from ratchet_tck.contracts.base_race import race
from ratchet_tck.fixture import StoreFixture

UPDATED = StateWriteResult.UPDATED
CONFLICT = StateWriteResult.VERSION_CONFLICT
SUPERSEDED = StateWriteResult.SUPERSEDED


class JobExtensionStoreContract(StoreContract):
    """Properties are write-once with literal prefix lookup; state writes are CAS on a version
    and fenced by the claim sequence (SUPERSEDED checked before the version)."""

    capability = JobExtensionStore
    summary = "write-once properties, literal prefixes, state CAS, claim fencing, races"

    def test_put_property_is_write_once(self, tck_fixture: StoreFixture) -> None:
        ext = self.cap(tck_fixture, JobExtensionStore)
        job = self.insert(tck_fixture)
        assert ext.put_property(job.id, "tenant", "acme") is True
        assert ext.put_property(job.id, "tenant", "evil") is False
        assert ext.get_property(job.id, "tenant") == "acme"
        assert ext.get_property(job.id, "absent") is None
        assert ext.get_property(uuid7(), "tenant") is None

    def test_concurrent_first_writes_have_one_winner(self, tck_fixture: StoreFixture) -> None:
        ext = self.cap(tck_fixture, JobExtensionStore)
        job = self.insert(tck_fixture)
        results = race(8, lambda i: (i, ext.put_property(job.id, "owner", f"writer-{i}")))
        winners = [i for i, won in results if won]
        assert len(winners) == 1
        assert ext.get_property(job.id, "owner") == f"writer-{winners[0]}"

    def test_put_property_of_missing_job_raises_not_found(self, tck_fixture: StoreFixture) -> None:
        ext = self.cap(tck_fixture, JobExtensionStore)
        with pytest.raises(JobNotFoundError):
            ext.put_property(uuid7(), "tenant", "acme")

    def test_too_long_property_key_is_refused(self, tck_fixture: StoreFixture) -> None:
        ext = self.cap(tck_fixture, JobExtensionStore)
        job = self.insert(tck_fixture)
        with raises_store_data_error("key"):
            ext.put_property(job.id, "k" * (MAX_KEY_LENGTH + 1), "v")
        assert ext.get_properties_by_prefix(job.id, "") == {}

    def test_prefix_lookup_is_literal(self, tck_fixture: StoreFixture) -> None:
        ext = self.cap(tck_fixture, JobExtensionStore)
        job = self.insert(tck_fixture)
        for key in ("a%b", "a_b", "axb", "ab", "b.a"):
            assert ext.put_property(job.id, key, key.upper())
        assert ext.get_properties_by_prefix(job.id, "a%") == {"a%b": "A%B"}
        assert ext.get_properties_by_prefix(job.id, "a_") == {"a_b": "A_B"}
        assert set(ext.get_properties_by_prefix(job.id, "a")) == {"a%b", "a_b", "axb", "ab"}
        assert ext.get_properties_by_prefix(job.id, "z") == {}

    def test_properties_for_jobs(self, tck_fixture: StoreFixture) -> None:
        ext = self.cap(tck_fixture, JobExtensionStore)
        a = self.insert(tck_fixture)
        b = self.insert(tck_fixture)
        ext.put_property(a.id, "k1", "v1")
        ext.put_property(a.id, "k2", "v2")
        ext.put_property(b.id, "k1", "w1")
        found = ext.properties_for_jobs([a.id, b.id, uuid7()])
        assert found[a.id] == {"k1": "v1", "k2": "v2"}
        assert found[b.id] == {"k1": "w1"}
        assert set(found) <= {a.id, b.id}

    def test_init_state_creates_version_zero_once(self, tck_fixture: StoreFixture) -> None:
        ext = self.cap(tck_fixture, JobExtensionStore)
        job = self.insert(tck_fixture)
        assert ext.get_state(job.id, "progress") is None
        assert ext.init_state(job.id, "progress", '{"n": 0}') is UPDATED
        assert ext.get_state(job.id, "progress") == VersionedState(json='{"n": 0}', version=0)
        assert ext.init_state(job.id, "progress", '{"n": 9}') is CONFLICT
        assert ext.get_state(job.id, "progress") == VersionedState(json='{"n": 0}', version=0)
        assert ext.init_state(job.id, "other", "{}") is UPDATED, "namespaces are independent"

    def test_update_state_is_a_compare_and_set_on_version(self, tck_fixture: StoreFixture) -> None:
        ext = self.cap(tck_fixture, JobExtensionStore)
        job = self.insert(tck_fixture)
        assert ext.update_state(job.id, "progress", "{}", 0) is CONFLICT, "no state yet"
        ext.init_state(job.id, "progress", '{"n": 0}')
        assert ext.update_state(job.id, "progress", '{"n": 1}', 0) is UPDATED
        assert ext.update_state(job.id, "progress", '{"n": 99}', 0) is CONFLICT
        assert ext.update_state(job.id, "progress", '{"n": 2}', 1) is UPDATED
        assert ext.get_state(job.id, "progress") == VersionedState(json='{"n": 2}', version=2)

    def test_concurrent_updates_of_one_version_have_one_winner(
        self, tck_fixture: StoreFixture
    ) -> None:
        ext = self.cap(tck_fixture, JobExtensionStore)
        job = self.insert(tck_fixture)
        ext.init_state(job.id, "progress", "{}")
        results = race(8, lambda i: (i, ext.update_state(job.id, "progress", f'"{i}"', 0)))
        winners = [i for i, r in results if r is UPDATED]
        assert len(winners) == 1
        assert {r for _, r in results} == {UPDATED, CONFLICT}
        assert ext.get_state(job.id, "progress") == VersionedState(
            json=f'"{winners[0]}"', version=1
        )

    def test_fenced_state_writes_need_the_current_claim(self, tck_fixture: StoreFixture) -> None:
        ext = self.cap(tck_fixture, JobExtensionStore)
        store = tck_fixture.store()
        job = self.insert(tck_fixture)
        assert ext.init_state(job.id, "progress", "{}", expected_claim_seq=0) is SUPERSEDED, (
            "a PENDING job has no live claim"
        )
        claimed = self.claim_one(store)
        seq = claimed.claim_seq
        assert ext.init_state(job.id, "progress", "{}", expected_claim_seq=seq + 1) is SUPERSEDED
        assert ext.get_state(job.id, "progress") is None
        assert ext.init_state(job.id, "progress", '"a"', expected_claim_seq=seq) is UPDATED
        assert ext.update_state(job.id, "progress", '"b"', 0, expected_claim_seq=seq) is UPDATED
        assert ext.get_state(job.id, "progress") == VersionedState(json='"b"', version=1)

    def test_superseded_is_checked_before_the_version(self, tck_fixture: StoreFixture) -> None:
        ext = self.cap(tck_fixture, JobExtensionStore)
        store = tck_fixture.store()
        self.insert(tck_fixture)
        first = self.claim_one(store, "tck-old")
        ext.init_state(first.id, "progress", '"v0"', expected_claim_seq=first.claim_seq)
        assert store.reset_running_jobs("tck-old") == 1
        second = self.claim_one(store, "tck-new")
        old = first.claim_seq
        assert ext.update_state(first.id, "progress", '"x"', 0, expected_claim_seq=old) is (
            SUPERSEDED
        )
        assert ext.update_state(first.id, "progress", '"x"', 7, expected_claim_seq=old) is (
            SUPERSEDED
        )
        assert ext.get_state(first.id, "progress") == VersionedState(json='"v0"', version=0)
        assert (
            ext.update_state(first.id, "progress", '"new"', 0, expected_claim_seq=second.claim_seq)
            is UPDATED
        )

    def test_finished_job_supersedes_fenced_writes(self, tck_fixture: StoreFixture) -> None:
        ext = self.cap(tck_fixture, JobExtensionStore)
        store = tck_fixture.store()
        self.insert(tck_fixture)
        job = self.claim_one(store)
        ext.init_state(job.id, "progress", "{}")
        assert store.mark_succeeded(job.id, job.claim_seq, None)
        assert self.reload(store, job).status is JobStatus.SUCCEEDED
        assert (
            ext.update_state(job.id, "progress", '"late"', 0, expected_claim_seq=job.claim_seq)
            is SUPERSEDED
        )
        assert ext.update_state(job.id, "progress", '"admin"', 0) is UPDATED, "unfenced write"
