"""MySQL/MariaDB's fair claim reads ``ix_ratchet_jobs_status_fair_claim`` (migration 0019): the
keys of PENDING jobs one probe each and each key's first jobs, as short ranges of PENDING
entries however many finished jobs a drained backlog left in the table. Checked with MariaDB's
``ANALYZE FORMAT=JSON`` (the rows each read really took), next to what the claim does with them.
PostgreSQL and SQLite keep their partial index (no finished job in it): the claim on every store
is the TCK's fairness contract."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from ratchet_api.model import JobStatus
from ratchet_api.store import JobEntity
from ratchet_store_sql import SqlJobStore, migrate
from ratchet_store_sql._dialects.base import claim_filter, claim_order
from ratchet_store_sql._dialects.mysql import _NEXT_KEY, fair_keys
from ratchet_store_sql.schema import jobs as J
from tests.store_sql.conftest import empty_tables

INDEX = "ix_ratchet_jobs_status_fair_claim"


@pytest.fixture
def mariadb_store(mariadb_url: str) -> Iterator[SqlJobStore]:
    migrate(mariadb_url)
    store = SqlJobStore(mariadb_url)
    try:
        yield store
    finally:
        empty_tables(store.engine)
        store.close()


def _tables(node: Any) -> Iterator[dict[str, Any]]:
    """Every ``table`` object of an EXPLAIN/ANALYZE FORMAT=JSON tree."""
    if isinstance(node, dict):
        if isinstance(node.get("table"), dict):
            yield node["table"]
        for value in node.values():
            yield from _tables(value)
    elif isinstance(node, list):
        for value in node:
            yield from _tables(value)


def _analyzed(
    store: SqlJobStore, stmt: Any, params: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The one table read of ``stmt`` as ``ANALYZE FORMAT=JSON`` reports it."""
    sql = str(
        stmt.params(params or {}).compile(store.engine, compile_kwargs={"literal_binds": True})
    )
    with store.engine.connect() as conn:
        plan = json.loads(conn.execute(sa.text("ANALYZE FORMAT=JSON " + sql)).scalar_one())
    (table,) = list(_tables(plan))
    return table


def test_fair_claim_reads_pending_entries_of_the_status_led_index(
    mariadb_store: SqlJobStore,
) -> None:
    store = mariadb_store
    now = store.server_now()
    due = now - timedelta(minutes=1)
    finished = [
        JobEntity(
            scheduled_at=due - timedelta(minutes=1),
            fairness_key="tenant-a",
            status=JobStatus.SUCCEEDED,
            finished_at=due,
        )
        for _ in range(2000)
    ]
    store.bulk_insert(finished)
    store.bulk_insert([JobEntity(scheduled_at=due, fairness_key="tenant-a") for _ in range(2000)])
    for key in ("tenant-b", "tenant-c"):
        store.bulk_insert([JobEntity(scheduled_at=now, fairness_key=key) for _ in range(3)])
    with store.engine.begin() as conn:
        conn.execute(sa.text("ANALYZE TABLE ratchet_jobs"))

    # the next key after tenant-a: one index entry read, not tenant-a's 4,000
    probe = _analyzed(store, _NEXT_KEY, {"after": "tenant-a"})
    assert probe["key"] == INDEX, probe
    assert probe["r_rows"] <= 2, probe
    # tenant-a's first due jobs: a range of its PENDING entries in claim order (no sort)
    head = (
        sa.select(J.c.id)
        .where(*claim_filter(store._d.now(), None, None), J.c.fairness_key == "tenant-a")
        .order_by(*claim_order())
        .limit(8)
    )
    read = _analyzed(store, head)
    assert read["key"] == INDEX, read
    assert read["r_rows"] <= 8, read

    # what the claim does with them: the keys interleaved, each key's first jobs first
    claimed = store.claim_next_batch("node-a", 6)
    assert [job.fairness_key for job in claimed[:3]] == ["tenant-a", "tenant-b", "tenant-c"]
    assert sorted(job.fairness_key or "" for job in claimed[3:]) == [
        "tenant-a",
        "tenant-b",
        "tenant-c",
    ]


def test_many_fairness_keys_are_read_in_a_bounded_number_of_statements(
    mariadb_store: SqlJobStore,
) -> None:
    # one probe per key was one round trip per key on every fair claim: 1,000 tenants with
    # PENDING jobs made each claim 1,001 statements (350 ms measured behind 20,000 jobs)
    store = mariadb_store
    keys = sorted(f"tenant-{i:04d}" for i in range(300))
    store.bulk_insert([JobEntity(fairness_key=key) for key in keys])
    store.bulk_insert([JobEntity(fairness_key=None) for _ in range(3)])
    seen: list[str] = []

    def record(*args: Any) -> None:
        seen.append(args[2])

    with store.engine.connect() as conn:
        sa.event.listen(store.engine, "before_cursor_execute", record)
        try:
            read = fair_keys(conn)
        finally:
            sa.event.remove(store.engine, "before_cursor_execute", record)
    assert read == keys
    assert len(seen) <= 40, len(seen)
    # and the fair claim still takes one job of as many keys
    claimed = store.claim_next_batch("node-a", 5)
    assert len({job.fairness_key for job in claimed}) == 5
