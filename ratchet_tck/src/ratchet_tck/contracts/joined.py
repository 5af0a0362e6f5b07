"""``JobStore.joined``: transactional enqueue (``scheduler.job(fn).transaction(handle)``,
Flask/Django enqueue in the view's transaction) writes through a joined view."""

from __future__ import annotations

import pytest

from ratchet_api.errors import StoreError
from ratchet_api.model import JobStatus
from ratchet_api.store.protocols import JobStore
from ratchet_tck.contracts.base import StoreContract, caller_transaction
from ratchet_tck.fixture import StoreFixture, StoreTransaction


def _transaction(fixture: StoreFixture) -> StoreTransaction:
    return caller_transaction(fixture, " (transactional enqueue is refused for it)")


class JobStoreJoinedContract(StoreContract):
    """REQUIRED: ``joined(handle)`` refuses a handle it cannot join with ``StoreError`` (never
    ``AttributeError``/``NotImplementedError``: the engine turns that ``StoreError`` into a
    clear ``InvalidJobError``); with a handle of the store's database (the fixture's
    ``begin_transaction()``), a job inserted through the view commits and rolls back with the
    caller's transaction and is readable through the view before the commit."""

    summary = "joined(): foreign handle refused; commit and rollback follow the caller"

    def test_joined_refuses_a_handle_it_cannot_join_with_store_error(
        self, tck_fixture: StoreFixture
    ) -> None:
        with pytest.raises(StoreError):
            tck_fixture.store().joined(object())

    def test_insert_through_a_joined_view_commits_with_the_callers_transaction(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        transaction = _transaction(tck_fixture)
        job = tck_fixture.new_pending_job()
        try:
            view = store.joined(transaction.handle)
            assert isinstance(view, JobStore)
            view.insert_job(job)
            seen = view.find_by_id(job.id)
            assert seen is not None and seen.status is JobStatus.PENDING
        except BaseException:
            transaction.rollback()
            raise
        transaction.commit()
        stored = store.find_by_id(job.id)
        assert stored is not None, "the committed job is not in the store"

    def test_insert_through_a_joined_view_is_undone_by_a_rollback(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        transaction = _transaction(tck_fixture)
        job = tck_fixture.new_pending_job()
        try:
            store.joined(transaction.handle).insert_job(job)
        finally:
            transaction.rollback()
        assert store.find_by_id(job.id) is None, "a rolled-back insert left the job behind"


__all__ = ["JobStoreJoinedContract"]
