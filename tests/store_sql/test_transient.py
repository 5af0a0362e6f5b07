"""Transient errors (issue 15): the store translates them into ``TransientStoreError`` and
retries nothing nested. A fenced write that meets a lock conflict is sent once (the worker's
retry helper decides about retrying); an operation the store does retry is sent at most
``CONFLICT_RETRIES`` times, never multiplied by an inner retry."""

from __future__ import annotations

import socket
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from ratchet_api.errors import DuplicateJobError, StoreDataError, StoreError, TransientStoreError
from ratchet_api.store import JobEntity
from ratchet_core.worker.store_retry import transient_predicate
from ratchet_store_sql import SqlJobStore
from ratchet_store_sql._base import CONFLICT_RETRIES
from ratchet_store_sql._errors import is_transient


@pytest.fixture
def locking_store(db_url: str, backend: str) -> Iterator[SqlJobStore]:
    """A store whose lock waits give up fast (a conflict instead of a long wait)."""
    if backend == "sqlite":
        pytest.skip("SQLite locks the whole file: a conflict is a busy timeout, not a row lock")
    if backend == "postgresql":
        options: dict[str, Any] = {"connect_args": {"options": "-c lock_timeout=200"}}
    else:
        options = {"connect_args": {"init_command": "SET innodb_lock_wait_timeout=1"}}
    store = SqlJobStore(db_url, engine_options=options)
    try:
        yield store
    finally:
        with store.engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM ratchet_jobs"))
        store.close()


def _updates(store: SqlJobStore) -> list[str]:
    seen: list[str] = []

    @sa.event.listens_for(store.engine, "before_cursor_execute")
    def _count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE"):
            seen.append(statement)

    return seen


def _row_locked(store: SqlJobStore, job_id: Any) -> sa.Connection:
    holder = sa.create_engine(store.engine.url).connect()
    holder.begin()
    holder.execute(sa.text("SELECT id FROM ratchet_jobs WHERE id = :id FOR UPDATE"), {"id": job_id})
    return holder


def test_a_fenced_write_meeting_a_conflict_is_sent_once(locking_store: SqlJobStore) -> None:
    store = locking_store
    store.insert_job(JobEntity())
    job = store.claim_next_batch("n", 1)[0]
    updates = _updates(store)
    holder = _row_locked(store, job.id.hex if store.engine.dialect.name != "postgresql" else job.id)
    try:
        with pytest.raises(TransientStoreError) as info:
            store.mark_succeeded(job.id, job.claim_seq, "r")
        assert info.value.retryable and is_transient(info.value.__cause__)
        # the store declares it: the engine's retry helper reads the store's own predicate
        assert store.is_transient(info.value) and store.is_transient(info.value.__cause__)
        assert transient_predicate(store)(info.value)
    finally:
        holder.rollback()
        holder.close()
        holder.engine.dispose()
    assert len(updates) == 1, f"{len(updates)} UPDATE statements for one failed fenced write"
    assert store.mark_succeeded(job.id, job.claim_seq, "r") is True


def test_an_operation_the_store_retries_is_sent_at_most_conflict_retries_times(
    locking_store: SqlJobStore,
) -> None:
    store = locking_store
    job = store.insert_job(JobEntity())
    updates = _updates(store)
    holder = _row_locked(store, job.id.hex if store.engine.dialect.name != "postgresql" else job.id)
    try:
        with pytest.raises(TransientStoreError):
            store.cancel_job(job.id)
    finally:
        holder.rollback()
        holder.close()
        holder.engine.dispose()
    assert len(updates) == CONFLICT_RETRIES


def test_errors_that_retrying_cannot_fix_are_not_transient(tmp_path: Any) -> None:
    store = SqlJobStore(f"sqlite:///{tmp_path / 'no-schema.db'}")
    try:
        with pytest.raises(StoreError, match="schema is missing") as info:
            store.find_by_id(JobEntity().id)
    finally:
        store.close()
    assert not info.value.retryable and not isinstance(info.value, TransientStoreError)
    assert not is_transient(info.value.__cause__)
    assert not store.is_transient(info.value) and not store.is_transient(info.value.__cause__)


def test_a_duplicate_and_bad_input_are_not_transient(store: SqlJobStore) -> None:
    job = store.insert_job(JobEntity())
    with pytest.raises(DuplicateJobError) as duplicate:
        store.insert_job(job)
    with pytest.raises(StoreDataError) as bad:
        store.insert_tags(job.id, [""])
    for error in (duplicate.value, bad.value, ValueError("not a store error")):
        assert not store.is_transient(error), error


def test_a_refused_connection_is_transient() -> None:
    # a port held by a socket that never listens: the connect is refused for real (after the
    # store's own connect retries, which are safe because nothing was sent)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
        store = SqlJobStore(f"postgresql+psycopg://postgres@127.0.0.1:{port}/x")
        try:
            with pytest.raises(TransientStoreError) as info:
                store.find_by_id(JobEntity().id)
        finally:
            store.close()
    assert store.is_transient(info.value) and store.is_transient(info.value.__cause__)


def test_an_sqlite_insert_meeting_a_held_write_lock_is_transient(tmp_path: Any) -> None:
    # single inserts go straight on the sqlite3 connection: their errors are translated the
    # same way (a busy file is a ConflictError once the busy timeout ran out)
    url = f"sqlite:///{tmp_path / 'locked.db'}"
    store = SqlJobStore(url, create_schema=True, sqlite_busy_timeout_ms=50)
    holder = sqlite3.connect(tmp_path / "locked.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        job = JobEntity(tags=("a",))
        with pytest.raises(TransientStoreError, match="locked") as info:
            store.insert_job(job)
        assert store.is_transient(info.value)
        holder.execute("ROLLBACK")
        assert store.insert_job(job) == job
        assert store.find_tags(job.id) == ["a"]
        with pytest.raises(DuplicateJobError):
            store.insert_job(job)
    finally:
        holder.close()
        store.close()
