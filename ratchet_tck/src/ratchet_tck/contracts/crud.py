"""JobCrudStore contract."""

from __future__ import annotations

import attrs
import pytest

from ratchet_api.errors import DuplicateJobError, JobNotFoundError, StoreDataError
from ratchet_api.ids import uuid7
from ratchet_api.model import JobPriority, JobStatus, JobType
from ratchet_api.store.versions import SPI_1_1
from ratchet_tck.contracts.base import (
    MS,
    StoreContract,
    assert_aware_utc,
    assert_same_instant,
    naive,
)
from ratchet_tck.fixture import StoreFixture, now_ms


class JobCrudStoreContract(StoreContract):
    """Insert, find, update and delete jobs; idempotency keys; invalid values refused."""

    summary = (
        "insert, find, update, delete; idempotency keys and tags compared byte by byte"
        " (case and trailing spaces count); an integer the store cannot hold refused, never"
        " altered; bad input"
    )

    def test_insert_then_find_returns_every_field(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        parent = store.insert_job(tck_fixture.new_pending_job())
        job = tck_fixture.new_pending_job(
            priority=JobPriority.HIGH,
            job_type=JobType.WORKFLOW_STEP,
            payload='{"args": [1, "two"], "kwargs": {"x": null}}',
            max_retries=7,
            backoff='{"kind": "FIXED"}',
            execution_target="gpu",
            tags=("tck-a", "tck-b"),
            parent_id=parent.id,
            signal_key="tck-signal",
            resource_key="tck-resource",
            recurring_name="tck-recurring",
            workflow='{"v":1,"dependents":true}',
        )
        stored = store.insert_job(job)
        found = store.find_by_id(job.id)
        assert found is not None
        for got in (stored, found):
            assert got.id == job.id
            assert got.status is JobStatus.PENDING
            assert got.priority == JobPriority.HIGH
            assert got.job_type is JobType.WORKFLOW_STEP
            assert got.target == job.target
            assert got.payload == job.payload
            assert got.max_retries == 7
            assert got.backoff == job.backoff
            assert got.execution_target == "gpu"
            assert sorted(got.tags) == ["tck-a", "tck-b"]
            assert got.parent_id == parent.id
            assert got.signal_key == "tck-signal"
            assert got.resource_key == "tck-resource"
            assert got.recurring_name == "tck-recurring"
            if self.spi_target >= SPI_1_1:  # the workflow field came with store SPI 1.1
                assert got.workflow == '{"v":1,"dependents":true}'
            assert got.attempt == 0
            assert got.claim_seq == 0
            assert got.owner is None
            assert_same_instant(got.scheduled_at, job.scheduled_at, "scheduled_at")
            assert_same_instant(got.created_at, job.created_at, "created_at")
            assert_aware_utc(got.scheduled_at, "scheduled_at")

    def test_find_by_id_of_missing_job_is_none(self, tck_fixture: StoreFixture) -> None:
        assert tck_fixture.store().find_by_id(uuid7()) is None

    def test_insert_with_existing_id_raises_duplicate(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = store.insert_job(tck_fixture.new_pending_job(payload='{"v": 1}'))
        with pytest.raises(DuplicateJobError):
            store.insert_job(attrs.evolve(job, payload='{"v": 2}', idempotency_key=None))
        assert self.reload(store, job).payload == '{"v": 1}'

    def test_idempotency_key_returns_existing_job(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        first = store.insert_job(tck_fixture.new_pending_job(idempotency_key="tck-key-1"))
        second = store.insert_job(tck_fixture.new_pending_job(idempotency_key="tck-key-1"))
        assert second.id == first.id
        found = store.find_by_idempotency_key("tck-key-1")
        assert found is not None and found.id == first.id
        assert store.find_by_idempotency_key("tck-key-absent") is None

    def test_keys_and_tags_differing_by_case_or_a_trailing_space_are_distinct(
        self, tck_fixture: StoreFixture
    ) -> None:
        """Keys compare byte by byte: a store whose column collation folds case or pads with
        spaces (MySQL/MariaDB's defaults) would take the second job for a duplicate of the first
        and never run it."""
        store = tck_fixture.store()
        keys = ("tck-Key", "tck-key", "tck-key ")
        jobs = [
            store.insert_job(tck_fixture.new_pending_job(idempotency_key=k, tags=(k,)))
            for k in keys
        ]
        assert len({job.id for job in jobs}) == 3
        for key, job in zip(keys, jobs, strict=True):
            found = store.find_by_idempotency_key(key)
            assert found is not None and found.id == job.id, repr(key)
            assert store.find_tags(job.id) == [key]

    def test_insert_never_changes_an_integer_it_cannot_hold(
        self, tck_fixture: StoreFixture
    ) -> None:
        """A ``max_retries`` of 2**40 is refused with ``StoreDataError`` naming the field or
        stored as it is, never altered; an update of ``attempt`` likewise."""
        store = tck_fixture.store()
        big = tck_fixture.new_pending_job(max_retries=2**40)
        try:
            store.insert_job(big)
        except StoreDataError as exc:
            assert "max_retries" in str(exc)
            assert store.find_by_id(big.id) is None
        else:
            assert self.reload(store, big).max_retries == 2**40
        job = store.insert_job(tck_fixture.new_pending_job())
        try:
            store.update_job(attrs.evolve(job, attempt=2**40))
        except StoreDataError as exc:
            assert "attempt" in str(exc)
            assert self.reload(store, job).attempt == job.attempt
        else:
            assert self.reload(store, job).attempt == 2**40

    def test_update_job_replaces_fields_and_tags(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = store.insert_job(tck_fixture.new_pending_job(tags=("tck-old",)))
        later = now_ms()
        changed = attrs.evolve(
            job,
            priority=JobPriority.CRITICAL,
            payload='{"new": true}',
            tags=("tck-new",),
            scheduled_at=later,
        )
        updated = store.update_job(changed)
        found = self.reload(store, job)
        for got in (updated, found):
            assert got.priority == JobPriority.CRITICAL
            assert got.payload == '{"new": true}'
            assert list(got.tags) == ["tck-new"]
            assert_same_instant(got.scheduled_at, later, "scheduled_at")
            assert got.updated_at >= job.updated_at - MS
        assert store.find_tags(job.id) == ["tck-new"]

    def test_update_of_missing_job_raises_not_found(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        with pytest.raises(JobNotFoundError):
            store.update_job(tck_fixture.new_pending_job())
        assert store.find_by_id(tck_fixture.new_pending_job().id) is None

    def test_delete_removes_job_and_reports_existence(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = store.insert_job(tck_fixture.new_pending_job())
        assert store.delete_job(job.id) is True
        assert store.find_by_id(job.id) is None
        assert store.find_tags(job.id) == []
        assert store.delete_job(job.id) is False

    def test_insert_refuses_naive_datetime_naming_field(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = tck_fixture.new_pending_job()
        # attrs validation refuses this at construction; a store must still check its boundary
        # (entities can be built by converters that skip validation).
        object.__setattr__(job, "scheduled_at", naive(job.scheduled_at))
        with pytest.raises(StoreDataError) as caught:
            store.insert_job(job)
        assert "scheduled_at" in str(caught.value)
        assert store.find_by_id(job.id) is None

    def test_insert_refuses_too_long_tag_and_stores_nothing(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        job = tck_fixture.new_pending_job()
        object.__setattr__(job, "tags", ("tck-ok", "t" * 129))
        with pytest.raises(StoreDataError) as caught:
            store.insert_job(job)
        assert "tag" in str(caught.value)
        assert store.find_by_id(job.id) is None
