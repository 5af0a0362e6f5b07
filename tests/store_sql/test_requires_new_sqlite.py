"""REQUIRES_NEW writes through a view joined to a caller's transaction on SQLite (issue 25).

SQLite has one writer per file. A liveness write (heartbeat, lock, node deletion) whose caller
has not written in its transaction commits on its own; once the caller has written, it holds
the only write lock until it ends, so the liveness write is refused at once with a
``StoreError`` naming the cause (before: it waited the whole busy timeout and failed with a
``ConflictError``).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import cast

import pytest

from ratchet_api.errors import StoreError
from ratchet_api.store import JobEntity, NodeEntity
from ratchet_store_sql import SqlJobStore
from ratchet_store_sql._errors import ConflictError


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SqlJobStore]:
    store = SqlJobStore(f"sqlite:///{tmp_path / 'requires-new.db'}")
    store.schema.upgrade()
    try:
        yield store
    finally:
        store.close()


def test_a_liveness_write_before_the_caller_writes_commits_on_its_own(
    sqlite_store: SqlJobStore,
) -> None:
    with sqlite_store.engine.connect() as conn:
        trans = conn.begin()
        view = cast(SqlJobStore, sqlite_store.joined(conn))
        view.upsert_heartbeat(NodeEntity(node_id="n1"))
        assert view.try_lock("leader", "me", timedelta(seconds=30))
        # committed already: another connection sees both before the caller ends
        assert [n.node_id for n in sqlite_store.find_all_nodes()] == ["n1"]
        view.insert_job(JobEntity())
        trans.rollback()
    assert [n.node_id for n in sqlite_store.find_all_nodes()] == ["n1"]
    lock = sqlite_store.find_lock("leader")
    assert lock is not None and lock.owner == "me"


def test_a_liveness_write_after_the_caller_wrote_is_refused_at_once_naming_the_cause(
    sqlite_store: SqlJobStore,
) -> None:
    job = JobEntity()
    with sqlite_store.engine.connect() as conn:
        trans = conn.begin()
        view = cast(SqlJobStore, sqlite_store.joined(conn))
        view.insert_job(job)
        with pytest.raises(StoreError, match=r"REQUIRES_NEW.*write lock") as info:
            view.upsert_heartbeat(NodeEntity(node_id="n1"))
        # not the busy timeout's ConflictError: nothing waited for the caller
        assert not isinstance(info.value, ConflictError)
        with pytest.raises(StoreError, match="try_lock is REQUIRES_NEW"):
            view.try_lock("leader", "me", timedelta(seconds=30))
        # the caller's transaction is intact and still commits
        trans.commit()
    assert sqlite_store.find_by_id(job.id) is not None
    assert sqlite_store.find_all_nodes() == []
    # the connection that refused kept the configured busy timeout
    sqlite_store.upsert_heartbeat(NodeEntity(node_id="n2"))
    with sqlite_store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 10_000
