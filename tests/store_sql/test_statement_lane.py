"""PostgreSQL's one-statement writes (a single enqueue, the worker's batched success, audit and
started marks) run on the store's ``StatementLane``: a few autocommit connections of its own,
besides the pool. They take nothing from the pool, add at most ``LANE_SIZE`` connections,
recover from a connection the server closed, survive a fork on both sides, end with the
store, and leave a connection usable after a statement's error."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from ratchet_api.errors import DuplicateJobError
from ratchet_api.store.entities import JobEntity
from ratchet_store_sql import SqlJobStore
from ratchet_store_sql._lane import LANE_SIZE
from tests import servers
from tests.store_sql.conftest import empty_tables


@pytest.fixture
def backend() -> str:
    return "postgresql"


@pytest.fixture
def named(db_url: str) -> Iterator[tuple[SqlJobStore, str]]:
    """A store whose connections carry an application name of their own (counted in
    ``pg_stat_activity``), and that name."""
    name = f"lane-{uuid.uuid4().hex[:12]}"
    url = sa.make_url(db_url).update_query_dict({"application_name": name})
    store = SqlJobStore(url.render_as_string(hide_password=False))
    try:
        yield store, name
    finally:
        store.close()
        engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
        try:
            empty_tables(engine)  # the database is shared with the other store tests
        finally:
            engine.dispose()


def _sessions(db_url: str, name: str) -> int:
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    sa.text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :n"),
                    {"n": name},
                ).scalar_one()
            )
    finally:
        engine.dispose()


def _checkouts(store: SqlJobStore) -> list[int]:
    taken: list[int] = []
    sa.event.listen(store.engine, "checkout", lambda *_: taken.append(1))
    return taken


def test_single_writes_take_no_connection_from_the_pool(
    named: tuple[SqlJobStore, str],
) -> None:
    store, _ = named
    store.insert_job(JobEntity())  # through the pool: it now has an idle connection
    store.insert_job(JobEntity())  # the lane takes that one
    taken = _checkouts(store)
    jobs = [store.insert_job(JobEntity()) for _ in range(20)]
    assert taken == [], "a single enqueue took a pooled connection"
    assert all(store.find_by_id(job.id) is not None for job in jobs)


def test_threads_beyond_the_lane_use_the_pool_and_the_lane_stays_small(
    named: tuple[SqlJobStore, str], db_url: str
) -> None:
    store, name = named
    threads, each = 6, 30
    start = threading.Barrier(threads)
    ids: list[Any] = []
    errors: list[BaseException] = []

    def enqueue() -> None:
        try:
            start.wait()
            for _ in range(each):
                ids.append(store.insert_job(JobEntity()).id)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=enqueue) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []
    assert len(set(ids)) == threads * each
    assert all(store.find_by_id(job_id) is not None for job_id in ids)
    pooled = store.engine.pool.checkedin()  # type: ignore[attr-defined]
    assert _sessions(db_url, name) <= pooled + LANE_SIZE


def test_close_ends_the_lane_connections(named: tuple[SqlJobStore, str], db_url: str) -> None:
    store, name = named
    store.insert_job(JobEntity())
    assert _sessions(db_url, name) >= 1
    store.close()
    assert _sessions(db_url, name) == 0


def test_a_lane_connection_the_server_closed_is_replaced(
    named: tuple[SqlJobStore, str], db_url: str
) -> None:
    store, _ = named
    store.insert_job(JobEntity())
    store.insert_job(JobEntity())  # the lane holds a connection
    assert servers.kill_database_connections(db_url) >= 1
    job = store.insert_job(JobEntity())  # no error: found dead before use, replaced
    assert store.find_by_id(job.id) is not None


def test_an_error_leaves_the_lane_connection_usable(named: tuple[SqlJobStore, str]) -> None:
    store, _ = named
    store.insert_job(JobEntity())
    job = store.insert_job(JobEntity())
    taken = _checkouts(store)
    with pytest.raises(DuplicateJobError):
        store.insert_job(JobEntity(id=job.id, target="other:f"))
    again = store.insert_job(JobEntity())
    assert taken == [], "the lane connection was dropped after a refused insert"
    assert store.find_by_id(again.id) is not None


def test_a_forked_child_never_uses_its_parents_lane(named: tuple[SqlJobStore, str]) -> None:
    store, _ = named
    store.insert_job(JobEntity())
    store.insert_job(JobEntity())  # the parent's lane holds a connection
    pid = os.fork()
    if pid == 0:  # the child: its own connection, the parent's left alone
        code = 1
        try:
            code = 0 if store.find_by_id(store.insert_job(JobEntity()).id) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child could not write"
    job = store.insert_job(JobEntity())  # the parent's connection still works
    assert store.find_by_id(job.id) is not None


def test_a_claim_on_the_lane_returns_the_jobs_as_stored(named: tuple[SqlJobStore, str]) -> None:
    """The plain claim goes on the lane and types its rows itself: every field of a claimed
    job (aware UTC stamps, ids, tags, the started mark) equals the job read back."""
    store, _ = named
    store.insert_job(JobEntity())
    store.insert_job(JobEntity())  # the lane holds a connection now
    store.claim_next_batch("other-node", 5)  # probes for fairness keys (the pool's path)
    due = datetime.now(UTC) - timedelta(seconds=1)
    jobs = [
        store.insert_job(
            JobEntity(
                target="m:f",
                payload='{"a": 1}',
                scheduled_at=due,
                tags=("b", "a"),
                execution_target="default",
                backoff='{"v": 1}',
            )
        )
        for _ in range(3)
    ]
    taken = _checkouts(store)
    claimed = store.claim_and_start("lane-node", 100, start=2)
    assert taken == [], "the claim took a pooled connection"
    assert {job.id for job in jobs} <= {job.id for job in claimed}
    for job in claimed:
        assert job == store.find_by_id(job.id)
        assert job.started_at is not None and job.started_at.tzinfo is not None
    assert sum(job.dispatched_at is not None for job in claimed) == 2
