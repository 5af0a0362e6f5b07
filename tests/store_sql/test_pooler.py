"""The SQL store behind PgBouncer in transaction pooling mode (``?ratchet_pooler=transaction``).

The whole TCK also runs through PgBouncer (``test_tck_sql.py``, id ``pgbouncer``); these tests
add what the TCK cannot say: how the URL option is read, and that many threads sharing the
pooler's few server connections never meet a statement prepared by another client.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from uuid import UUID

import pytest
import sqlalchemy as sa

from ratchet_api.errors import StoreError
from ratchet_api.store import JobEntity
from ratchet_store_sql import SqlJobStore, create_store_engine, migrate
from ratchet_store_sql._engine import explicit_prepare, pooler_mode
from tests.store_sql.conftest import checked_out, empty_tables

THREADS = 8
JOBS_PER_THREAD = 25


@pytest.fixture
def pooled_store(pgbouncer_url: str) -> Iterator[SqlJobStore]:
    migrate(pgbouncer_url)
    store = SqlJobStore(pgbouncer_url)
    try:
        yield store
        assert checked_out(store.engine) == 0
    finally:
        empty_tables(store.engine)
        store.close()


def test_the_pooler_option_is_read_by_ratchet_and_not_sent_to_the_driver(
    pgbouncer_url: str,
) -> None:
    engine = create_store_engine(pgbouncer_url)
    try:
        assert "ratchet_pooler" not in engine.url.query
        assert pooler_mode(engine) == "transaction"
        assert explicit_prepare(engine) is None
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT 1")).scalar_one() == 1
    finally:
        engine.dispose()


def test_without_the_option_the_store_prepares_its_hot_statements() -> None:
    engine = create_store_engine("postgresql+psycopg://u@127.0.0.1:1/db")
    assert pooler_mode(engine) == "none"
    assert explicit_prepare(engine) is True
    engine.dispose()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "postgresql+psycopg://u@h/db?ratchet_pooler=statement",
            "statement-pooling PgBouncer cannot run the store's multi-statement transactions",
        ),
        (
            "postgresql+psycopg://u@h/db?ratchet_pooler=pgpool",
            "ratchet_pooler='pgpool': expected one of none, session, transaction",
        ),
        (
            "sqlite:///ratchet.db?ratchet_pooler=transaction",
            "ratchet_pooler is for PostgreSQL",
        ),
    ],
)
def test_a_pooler_option_the_store_cannot_run_behind_is_refused_naming_it(
    url: str, message: str
) -> None:
    with pytest.raises(StoreError, match=message):
        create_store_engine(url)


def test_threads_enqueueing_and_claiming_through_the_pooler_see_each_job_once(
    pooled_store: SqlJobStore,
) -> None:
    """Every thread inserts (one round trip in autocommit: the statement that is prepared
    explicitly without a pooler) and claims, on connections that PgBouncer hands out from its
    small server pool: a prepared statement would be missing or already exist on the server
    connection a later transaction gets."""
    store = pooled_store
    inserted: list[UUID] = []
    claimed: list[UUID] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    barrier = threading.Barrier(THREADS)

    def work(node: str) -> None:
        try:
            barrier.wait()
            for _ in range(JOBS_PER_THREAD):
                job = store.insert_job(JobEntity())
                batch = store.claim_next_batch(node, 2)
                with lock:
                    inserted.append(job.id)
                    claimed.extend(j.id for j in batch)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(f"node-{n}",)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    claimed.extend(j.id for j in store.claim_next_batch("node-last", THREADS * JOBS_PER_THREAD))
    counts = Counter(claimed)
    assert [job_id for job_id, n in counts.items() if n > 1] == []
    assert set(counts) == set(inserted)
    assert len(inserted) == THREADS * JOBS_PER_THREAD
