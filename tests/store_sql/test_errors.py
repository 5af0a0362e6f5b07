"""Bad input and broken connections get clear errors; nothing half-written stays behind."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from ratchet_api.errors import StoreDataError, StoreError, TransientStoreError
from ratchet_api.store import JobEntity
from ratchet_store_sql import SqlJobStore
from ratchet_store_sql._errors import translate
from ratchet_store_sql.schema import jobs
from tests import servers


def test_unknown_status_in_a_row_names_the_field_and_job(store: SqlJobStore) -> None:
    job = store.insert_job(JobEntity())
    with store.engine.begin() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.id == job.id).values(status="EXPLODED"))
    with pytest.raises(StoreDataError, match=r"'status'.*EXPLODED") as info:
        store.find_by_id(job.id)
    assert info.value.field == "status" and info.value.job_id == job.id


def test_too_long_tag_is_refused_and_nothing_is_written(store: SqlJobStore) -> None:
    job = store.insert_job(JobEntity(tags=("ok",)))
    with pytest.raises(StoreDataError, match="'tags'") as info:
        store.insert_tags(job.id, ["fine", "x" * 129])
    assert info.value.field == "tags"
    assert store.find_tags(job.id) == ["ok"]


def test_non_utc_datetime_argument_is_refused_naming_it(store: SqlJobStore) -> None:
    job = store.insert_job(JobEntity())
    [claimed] = store.claim_next_batch("n", 1)
    naive = datetime(2030, 1, 1)
    with pytest.raises(StoreDataError, match="'run_at'"):
        store.schedule_retry(job.id, claimed.claim_seq, naive, "boom")
    plus_two = datetime(2030, 1, 1, tzinfo=timezone(timedelta(hours=2)))
    with pytest.raises(StoreDataError, match="'cutoff'"):
        store.delete_dead_letter_older_than(plus_two, 10)
    stored = store.find_by_id(job.id)
    assert stored is not None and stored.status.value == "RUNNING"


def test_datetimes_round_trip_as_aware_utc_with_microseconds(store: SqlJobStore) -> None:
    at = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    job = store.insert_job(JobEntity(scheduled_at=at))
    stored = store.find_by_id(job.id)
    assert stored is not None
    assert stored.scheduled_at == at and stored.scheduled_at.tzinfo is not None


def test_a_closed_store_refuses_calls(db_url: str) -> None:
    store = SqlJobStore(db_url)
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        store.find_by_id(JobEntity().id)


def _kill_backend(url: str, backend_pid: int) -> None:
    assert servers.kill_database_connections(url, backend_pid) == 1


def _backend_pid(conn: sa.Connection) -> int:
    if conn.dialect.name == "postgresql":
        return int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())
    return int(conn.execute(sa.text("SELECT CONNECTION_ID()")).scalar_one())


def test_dropped_connection_mid_transaction_is_transient_and_leaves_nothing(
    store: SqlJobStore, db_url: str, backend: str
) -> None:
    if backend == "sqlite":
        pytest.skip("SQLite is an embedded file: there is no server connection to drop")
    first = JobEntity()
    conn = store.engine.connect()
    try:
        conn.begin()
        view = store.joined(conn)
        view.insert_job(first)
        _kill_backend(db_url, _backend_pid(conn))
        with pytest.raises(TransientStoreError) as info:
            view.insert_job(JobEntity())
        assert isinstance(info.value.__cause__, sa.exc.DBAPIError)
    finally:
        conn.close()
    # the half-done transaction is gone and the store works again on a fresh connection
    assert store.find_by_id(first.id) is None
    second = store.insert_job(JobEntity())
    assert store.find_by_id(second.id) is not None


def test_killed_pooled_connection_is_replaced_before_the_next_statement(
    store: SqlJobStore, db_url: str, backend: str
) -> None:
    if backend == "sqlite":
        pytest.skip("SQLite is an embedded file: there is no server connection to drop")
    with store.engine.connect() as conn:
        pid = _backend_pid(conn)
    _kill_backend(db_url, pid)  # the connection now sits dead in the pool
    assert store.claim_next_batch("n", 5) == []  # pinged at checkout, replaced
    job = store.insert_job(JobEntity())
    assert [j.id for j in store.claim_next_batch("n", 5)] == [job.id]


def test_first_enqueue_after_every_connection_was_killed_succeeds(
    store: SqlJobStore, db_url: str, backend: str
) -> None:
    """Issue 17: after pg_terminate_backend / KILL of every connection (what a database
    restart does to the pool), the first insert_job does not fail."""
    if backend == "sqlite":
        pytest.skip("SQLite is an embedded file: there is no server connection to drop")
    warm = [store.engine.connect() for _ in range(3)]  # several connections in the pool
    for conn in warm:
        conn.execute(sa.text("SELECT 1"))
        conn.close()
    assert servers.kill_database_connections(db_url) >= 1
    first = store.insert_job(JobEntity(tags=("after-kill",)))
    stored = store.find_by_id(first.id)
    assert stored is not None and stored.tags == ("after-kill",)
    assert servers.kill_database_connections(db_url) >= 1
    keyed = store.insert_job(JobEntity(idempotency_key=f"k-{uuid.uuid4()}"))
    assert store.find_by_id(keyed.id) is not None


def test_insert_retried_after_its_connection_broke_is_written_once(
    store: SqlJobStore, db_url: str, backend: str
) -> None:
    """The connection breaks under the insert: the store sends it again on a new connection,
    and a job that the lost attempt did commit is recognised (same id and payload), not
    reported as a duplicate."""
    if backend == "sqlite":
        pytest.skip("SQLite is an embedded file: there is no server connection to drop")
    job = JobEntity()
    original = store._insert_job_once
    calls: list[int] = []

    def commit_then_lose_the_answer(entity: JobEntity) -> JobEntity:
        calls.append(1)
        if len(calls) == 1:
            with store.engine.connect() as conn:
                original(entity)  # committed...
                _kill_backend(db_url, _backend_pid(conn))
                try:  # ...but the answer is lost with the connection
                    conn.execute(sa.text("SELECT 1"))
                except sa.exc.DBAPIError as exc:
                    raise translate(exc, "insert_job") from exc
                raise AssertionError("the killed connection still answered")
        return original(entity)

    store._insert_job_once = commit_then_lose_the_answer  # type: ignore[method-assign]
    assert store.insert_job(job).id == job.id
    assert len(calls) == 2
    with store.engine.connect() as conn:
        count = conn.execute(
            sa.select(sa.func.count()).select_from(jobs).where(jobs.c.id == job.id)
        ).scalar_one()
    assert count == 1
