"""Migration 0009 moves stored priorities from the four old levels to named points of
-100..100 (jobs, archived jobs, recurring definitions) and back, on every SQL backend."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from ratchet_api.model import JobPriority
from ratchet_store_sql import SqlJobStore
from ratchet_store_sql.schema import jobs
from tests.conftest import SQL_BACKENDS, backend_url

OLD_TO_NEW = {0: JobPriority.LOW, 5: JobPriority.NORMAL, 10: JobPriority.HIGH, 15: 100}


@pytest.fixture(params=SQL_BACKENDS)
def url(request: pytest.FixtureRequest) -> str:
    return backend_url(request, request.param)


def _insert_job(conn: sa.Connection, priority: int) -> uuid.UUID:
    job_id = uuid.uuid4()
    now = datetime.now(UTC)
    conn.execute(
        jobs.insert().values(
            id=job_id,
            status="PENDING",
            priority=priority,
            job_type="STANDARD",
            target="m:f",
            payload="{}",
            scheduled_at=now,
            created_at=now,
            updated_at=now,
            attempt=0,
            max_retries=3,
            claim_seq=0,
        )
    )
    return job_id


def test_0009_moves_old_levels_to_the_integer_range_and_back(url: str) -> None:
    store = SqlJobStore(url)
    try:
        store.schema.upgrade("0002")
        with store.engine.begin() as conn:
            ids = {old: _insert_job(conn, old) for old in OLD_TO_NEW}

        store.schema.upgrade("0009")
        # read in the columns of revision 0009 (the store's statements name the newest schema)
        with store.engine.connect() as conn:
            moved = dict(conn.execute(sa.select(jobs.c.id, jobs.c.priority)).tuples().all())
        assert {old: moved[ids[old]] for old in OLD_TO_NEW} == {
            old: int(new) for old, new in OLD_TO_NEW.items()
        }

        store.schema.downgrade("0002")
        with store.engine.connect() as conn:
            rows = dict(conn.execute(sa.select(jobs.c.id, jobs.c.priority)).tuples().all())
        assert {old: rows[ids[old]] for old in OLD_TO_NEW} == {old: old for old in OLD_TO_NEW}
    finally:
        store.schema.downgrade("base")
        store.close()
