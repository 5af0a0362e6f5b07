"""``bulk_insert_parts`` (``StreamingBulkStore``) on the SQL store: PostgreSQL writes each part
into a COPY as it comes (the server has inserted rows of the first part before the second is
asked for), starts another COPY when a later part sets a column the first left empty, and
turns to the checked insert from the first part with an idempotency key on; every field of
every job survives on every SQL backend."""

from __future__ import annotations

import time
from collections.abc import Iterator
from uuid import uuid4

import attrs
import psycopg
import pytest
import sqlalchemy as sa

from ratchet_api.store import JobEntity
from ratchet_store_sql import SqlJobStore
from tests.store_sql.test_bulk_insert_rows import _sparse_jobs


def _plain(count: int) -> list[JobEntity]:
    template = _sparse_jobs()[0]
    return [attrs.evolve(template, id=uuid4()) for _ in range(count)]


def test_parts_keep_every_field_when_later_parts_set_more_columns(store: SqlJobStore) -> None:
    _, sparse, running, _ = _sparse_jobs()
    unkeyed = attrs.evolve(sparse, id=uuid4(), idempotency_key=None)
    parts = [
        _plain(3),  # the first COPY leaves parent_id, owner, ... out
        [unkeyed, *_plain(2)],  # sets them: a second COPY with its own columns
        [],
        [running],
        [sparse, *_plain(1)],  # a key: the rest goes through the checked insert
        _plain(2),
    ]
    jobs = [job for part in parts for job in part]
    assert store.bulk_insert_parts(iter(parts)) == len(jobs)
    for job in jobs:
        assert store.find_by_id(job.id) == job
    assert store.find_tags(unkeyed.id) == sorted(unkeyed.tags)
    # the key now exists: a later bulk in parts skips it, in any part
    again = attrs.evolve(sparse, id=uuid4())
    assert store.bulk_insert_parts([_plain(1), [again]]) == 1
    assert store.find_by_id(again.id) is None


def _copied_rows(dsn: str) -> int:
    """Rows the COPY of another session has processed (PostgreSQL's progress view)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(max(tuples_processed), 0) FROM pg_stat_progress_copy"
            " WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


def test_postgresql_inserts_a_part_before_the_next_is_built(
    store: SqlJobStore, backend: str
) -> None:
    if backend != "postgresql":
        pytest.skip("the streamed COPY is PostgreSQL's (pg_stat_progress_copy)")
    url = store.engine.url.set(drivername="postgresql")
    dsn = url.render_as_string(hide_password=False)
    seen: list[int] = []

    def parts() -> Iterator[list[JobEntity]]:
        yield _plain(2000)
        # the first part was sent while this generator is suspended: the server works on it
        deadline = time.monotonic() + 30
        while (copied := _copied_rows(dsn)) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(copied)
        yield _plain(10)

    assert store.bulk_insert_parts(parts()) == 2010
    assert seen and seen[0] > 0, "no row of the first part was inserted before the second"
    with store.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM ratchet_jobs")).scalar() == 2010
