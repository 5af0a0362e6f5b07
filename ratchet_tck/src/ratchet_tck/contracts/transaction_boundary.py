"""REQUIRES_NEW: liveness writes commit on their own.

The store SPI gives every method a transaction boundary (``ratchet_api.store.protocols``):
SUPPORTS reads may join a caller's transaction, REQUIRED mutations join the caller's
transaction of a ``joined`` view, and the liveness writes -- ``LockStore.try_lock``,
``unlock``, ``renew_lock``, ``NodeStore.upsert_heartbeat``, ``delete_inactive_nodes`` and
``delete_nodes_by_ids`` -- are REQUIRES_NEW: they commit independently, even when called
through a view joined to a caller's transaction, so the caller's rollback cannot undo them and
the caller's commit is not needed to make them visible. A heartbeat or a lease undone by an
application's rollback would make a live node look dead (its jobs recovered while they run)
or hand a lease to two holders.

A store may also refuse such a write at once with ``StoreError`` when it cannot commit it
independently of the caller's open write transaction (SQLite: one writer per file, so a
second connection would wait for the caller, who waits for it); nothing is then written.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from ratchet_api.errors import StoreError
from ratchet_api.store.entities import NodeEntity
from ratchet_api.store.protocols import JobStore, LockStore
from ratchet_tck.contracts.base import StoreContract, caller_transaction
from ratchet_tck.fixture import StoreFixture, StoreTransaction

_LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)


def _node(node_id: str) -> NodeEntity:
    # last_heartbeat is ignored: the store sets its own now
    return NodeEntity(
        node_id=node_id, host="tck-host", pid=4242, started_at=_LONG_AGO, last_heartbeat=_LONG_AGO
    )


def _transaction(fixture: StoreFixture) -> StoreTransaction:
    return caller_transaction(fixture, ", so no liveness write can join one")


def _node_ids(store: JobStore) -> set[str]:
    return {n.node_id for n in store.find_all_nodes()}


def _other_store(fixture: StoreFixture) -> tuple[JobStore, bool]:
    """A second store instance on the same database when the fixture can open one (what
    another process sees), else the fixture's store; True when it must be closed."""
    factory = fixture.store_factory()
    if factory is None:
        return fixture.store(), False
    return factory(), True


class TransactionBoundaryContract(StoreContract):
    """REQUIRED: the liveness writes (lock, unlock, renew, heartbeat, node deletion) are
    REQUIRES_NEW. Written through a view joined to a caller's transaction
    (``fixture.begin_transaction()``) they are visible to another store before the caller ends
    its transaction and survive its rollback. After the caller has itself written in the
    transaction, such a write either commits on its own in the same way or is refused at once
    with ``StoreError`` having written nothing (never joined, never undone by the rollback)."""

    summary = "lock, unlock, renew, heartbeat and node deletion commit on their own"

    def test_a_heartbeat_is_visible_to_another_store_without_a_commit_of_the_caller(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        store.upsert_heartbeat(_node("tck-rn-plain"))
        other, owned = _other_store(tck_fixture)
        try:
            assert "tck-rn-plain" in _node_ids(other), "a heartbeat is not committed on return"
        finally:
            if owned:
                other.close()

    def test_a_heartbeat_through_a_joined_view_survives_the_callers_rollback(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        transaction = _transaction(tck_fixture)
        try:
            store.joined(transaction.handle).upsert_heartbeat(_node("tck-rn-1"))
            seen_before_the_end = "tck-rn-1" in _node_ids(store)
        finally:
            transaction.rollback()
        assert seen_before_the_end, (
            "a heartbeat through a joined view waits for the caller's commit: it joined the "
            "caller's transaction (REQUIRES_NEW)"
        )
        assert "tck-rn-1" in _node_ids(store), (
            "the caller's rollback undid a heartbeat: it joined the caller's transaction "
            "(REQUIRES_NEW)"
        )

    def test_node_deletions_through_a_joined_view_survive_the_callers_rollback(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        store.upsert_heartbeat(_node("tck-rn-gone"))
        store.upsert_heartbeat(_node("tck-rn-stale"))
        stale_at = max(n.last_heartbeat for n in store.find_all_nodes())
        deadline = time.monotonic() + 10
        while store.server_now() <= stale_at + timedelta(milliseconds=5):
            assert time.monotonic() < deadline, "the store's clock does not advance"
            time.sleep(0.005)
        transaction = _transaction(tck_fixture)
        try:
            view = store.joined(transaction.handle)
            assert view.delete_nodes_by_ids(["tck-rn-gone"]) == 1
            assert view.delete_inactive_nodes(timedelta(milliseconds=1)) == 1
        finally:
            transaction.rollback()
        assert _node_ids(store) == set(), (
            "the caller's rollback brought deleted nodes back: node deletion joined the "
            "caller's transaction (REQUIRES_NEW)"
        )

    def test_lock_writes_through_a_joined_view_survive_the_callers_rollback(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        locks = store.capability(LockStore)
        if locks is None:
            pytest.skip("N/A: store does not advertise LockStore")
        hour = timedelta(hours=1)
        assert locks.try_lock("tck-rn-renewed", "tck-owner", timedelta(minutes=1))
        assert locks.try_lock("tck-rn-released", "tck-owner", timedelta(minutes=1))
        transaction = _transaction(tck_fixture)
        try:
            view = store.joined(transaction.handle).capability(LockStore)
            if view is None:
                pytest.skip("the joined view offers no LockStore: its locks cannot join")
            assert view.try_lock("tck-rn-taken", "tck-owner", hour)
            assert view.renew_lock("tck-rn-renewed", "tck-owner", hour)
            assert view.unlock("tck-rn-released", "tck-owner")
        finally:
            transaction.rollback()
        taken = locks.find_lock("tck-rn-taken")
        assert taken is not None and taken.owner == "tck-owner", (
            "the caller's rollback undid try_lock: it joined the caller's transaction"
        )
        renewed = locks.find_lock("tck-rn-renewed")
        assert renewed is not None
        assert renewed.expires_at > store.server_now() + timedelta(minutes=30), (
            "the caller's rollback undid renew_lock: it joined the caller's transaction"
        )
        assert locks.find_lock("tck-rn-released") is None, (
            "the caller's rollback undid unlock: it joined the caller's transaction"
        )

    def test_a_heartbeat_after_the_caller_wrote_commits_on_its_own_or_is_refused_at_once(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        transaction = _transaction(tck_fixture)
        job = tck_fixture.new_pending_job()
        refused: StoreError | None = None
        try:
            view = store.joined(transaction.handle)
            view.insert_job(job)  # the caller now holds a write of its own
            try:
                view.upsert_heartbeat(_node("tck-rn-after-write"))
            except StoreError as exc:
                refused = exc
        finally:
            transaction.rollback()
        assert store.find_by_id(job.id) is None, "the caller's rollback left its job behind"
        if refused is not None:
            assert "tck-rn-after-write" not in _node_ids(store), (
                f"the heartbeat was refused ({refused}) but written anyway"
            )
            return
        assert "tck-rn-after-write" in _node_ids(store), (
            "the caller's rollback undid a heartbeat written after the caller's own write: it "
            "joined the caller's transaction (REQUIRES_NEW)"
        )


__all__ = ["TransactionBoundaryContract"]
