"""PostgreSQL's claims commit without waiting for the WAL flush unless the store URL says
``ratchet_claim_commit=sync`` (docs/stores/postgresql.md, Durability). What is checked is the
setting of the claim's own transaction, read on its connection right after the claim statement,
for the plain claim and the fair one; and that the option is Ratchet's (read, checked, never
sent to the driver)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from ratchet_api.errors import StoreError
from ratchet_api.store import JobEntity
from ratchet_store_sql import SqlJobStore, create_store_engine, migrate
from tests.store_sql.conftest import empty_tables


def _with(url: str, option: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{option}"


def _store(url: str) -> Iterator[SqlJobStore]:
    migrate(url)
    store = SqlJobStore(url)
    try:
        yield store
    finally:
        empty_tables(store.engine)
        store.close()


@pytest.fixture
def default_store(postgres_url: str) -> Iterator[SqlJobStore]:
    yield from _store(postgres_url)


@pytest.fixture
def sync_store(postgres_url: str) -> Iterator[SqlJobStore]:
    yield from _store(_with(postgres_url, "ratchet_claim_commit=sync"))


def _claim_settings(store: SqlJobStore, fairness_key: str | None) -> list[str]:
    """``synchronous_commit`` as the store's claim statement leaves it in a transaction. The
    store runs the claim in autocommit (the statement is its transaction, over when it
    returns), so the statement it sent is captured and run again, with the same parameters,
    in an open transaction whose setting is then read (and rolled back)."""
    past = store.server_now() - timedelta(seconds=1)
    store.bulk_insert([JobEntity(scheduled_at=past, fairness_key=fairness_key) for _ in range(2)])
    sent: list[tuple[str, Any]] = []

    def after(_conn: sa.Connection, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if "UPDATE ratchet_jobs" in statement and "RETURNING" in statement:
            sent.append((statement, params))

    sa.event.listen(store.engine, "after_cursor_execute", after)
    try:
        assert len(store.claim_next_batch("node-a", 10)) == 2
    finally:
        sa.event.remove(store.engine, "after_cursor_execute", after)
    seen = []
    for statement, params in sent:
        with store.engine.connect() as conn:
            cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
            cursor.execute(statement, params)
            seen.append(cursor.execute("SHOW synchronous_commit").fetchone()[0])
            conn.rollback()
    return seen


@pytest.mark.parametrize("fairness_key", [None, "tenant-a"], ids=["plain", "fair"])
def test_a_claim_commits_without_waiting_for_the_wal_flush(
    default_store: SqlJobStore, fairness_key: str | None
) -> None:
    assert _claim_settings(default_store, fairness_key) == ["off"]


@pytest.mark.parametrize("fairness_key", [None, "tenant-a"], ids=["plain", "fair"])
def test_ratchet_claim_commit_sync_makes_the_claim_wait_for_it(
    sync_store: SqlJobStore, fairness_key: str | None
) -> None:
    assert _claim_settings(sync_store, fairness_key) == ["on"]


def test_the_option_is_checked_and_not_sent_to_the_driver(postgres_url: str, tmp_path: Any) -> None:
    engine = create_store_engine(_with(postgres_url, "ratchet_claim_commit=SYNC"))
    try:
        assert "ratchet_claim_commit" not in engine.url.query
    finally:
        engine.dispose()
    with pytest.raises(StoreError, match="ratchet_claim_commit='never'"):
        create_store_engine(_with(postgres_url, "ratchet_claim_commit=never"))
    with pytest.raises(StoreError, match="ratchet_claim_commit is for PostgreSQL"):
        create_store_engine(f"sqlite:///{tmp_path}/x.db?ratchet_claim_commit=sync")
