"""Joining a caller's transaction (transactional enqueue) and independent liveness writes."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy import orm

from ratchet_api.errors import DuplicateJobError, StoreError
from ratchet_api.store import JobEntity, NodeEntity
from ratchet_store_sql import SqlJobStore
from ratchet_store_sql.schema import jobs


def test_job_enqueued_in_committed_caller_transaction_exists(store: SqlJobStore) -> None:
    job = JobEntity(tags=("a",))
    with store.engine.connect() as conn, conn.begin():
        store.joined(conn).insert_job(job)
        # visible inside the transaction, invisible outside until commit
        assert store.joined(conn).find_by_id(job.id) is not None
        assert store.find_by_id(job.id) is None
    stored = store.find_by_id(job.id)
    assert stored is not None and stored.tags == ("a",)


def test_job_enqueued_in_rolled_back_caller_transaction_never_existed(store: SqlJobStore) -> None:
    job = JobEntity(tags=("a",))
    with store.engine.connect() as conn:
        trans = conn.begin()
        view = store.joined(conn)
        view.insert_job(job)
        view.bulk_insert([JobEntity(), JobEntity()])
        trans.rollback()
    assert store.find_by_id(job.id) is None
    assert store.find_tags(job.id) == []
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar() == 0


def test_orm_session_can_be_joined(store: SqlJobStore) -> None:
    job = JobEntity()
    with orm.Session(store.engine) as session:
        store.joined(session).insert_job(job)
        session.rollback()
    assert store.find_by_id(job.id) is None
    with orm.Session(store.engine) as session:
        store.joined(session).insert_job(job)
        session.commit()
    assert store.find_by_id(job.id) is not None


def test_liveness_writes_commit_even_when_the_caller_rolls_back(store: SqlJobStore) -> None:
    if store.engine.dialect.name == "sqlite":
        pytest.skip(
            "SQLite has one writer: after the caller's write a liveness write is refused at "
            "once (tests/store_sql/test_requires_new_sqlite.py)"
        )
    with store.engine.connect() as conn:
        trans = conn.begin()
        view = store.joined(conn)
        view.insert_job(JobEntity())
        assert view.try_lock("leader", "me", timedelta(seconds=30))
        view.upsert_heartbeat(NodeEntity(node_id="n1"))
        trans.rollback()
    lock = store.find_lock("leader")
    assert lock is not None and lock.owner == "me"
    assert [n.node_id for n in store.find_all_nodes()] == ["n1"]


def test_joining_something_else_is_refused(store: SqlJobStore) -> None:
    with pytest.raises(StoreError, match="Connection or ORM Session"):
        store.joined(object())


def test_a_failed_multi_row_insert_leaves_nothing_behind(store: SqlJobStore) -> None:
    first = JobEntity()
    store.insert_job(first)
    # the second job of the batch collides on its id: the whole batch is rolled back
    batch = [JobEntity(), JobEntity(id=first.id), JobEntity()]
    with pytest.raises(StoreError):
        store.bulk_insert(batch)
    assert store.find_by_id(batch[0].id) is None
    assert store.find_by_id(batch[2].id) is None


def test_pooled_connections_stay_transactional_after_single_inserts(store: SqlJobStore) -> None:
    # insert_job on PostgreSQL runs its one statement in autocommit on a pooled connection:
    # the next user of that connection must get a real transaction again (a rollback undoes).
    failed = JobEntity()
    store.insert_job(failed)
    with pytest.raises(DuplicateJobError):
        store.insert_job(failed)  # the error path gives its connection back as well
    for _ in range(3):
        store.insert_job(JobEntity(tags=("t",)))
    job = JobEntity()
    with store.engine.connect() as conn:
        trans = conn.begin()
        store.joined(conn).insert_job(job)
        trans.rollback()
    assert store.find_by_id(job.id) is None
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar() == 4
