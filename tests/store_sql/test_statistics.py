"""PostgreSQL: a bulk insert that outgrows what the planner knows of ``ratchet_jobs`` refreshes
its statistics, so that the claim reads the claim index in order instead of sorting every
pending job (a near-empty table's statistics make a bitmap scan plus a full sort look cheap)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from ratchet_api.store import JobEntity
from ratchet_store_sql import SqlJobStore
from ratchet_store_sql._dialects.postgresql import ANALYZE_AFTER_ROWS


@pytest.fixture(params=["postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    """PostgreSQL only: ANALYZE and the planner's row count are its own."""
    return str(request.param)


def _known_rows(store: SqlJobStore) -> float:
    with store.engine.connect() as conn:
        return float(
            conn.execute(
                sa.text("SELECT reltuples FROM pg_class WHERE oid = 'ratchet_jobs'::regclass")
            ).scalar_one()
        )


def _analyze(store: SqlJobStore) -> None:
    with store.engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE ratchet_jobs")
        conn.commit()


def test_a_bulk_insert_larger_than_the_known_table_refreshes_its_statistics(
    store: SqlJobStore,
) -> None:
    _analyze(store)  # the planner knows an empty table
    assert _known_rows(store) == 0
    store.bulk_insert([JobEntity() for _ in range(ANALYZE_AFTER_ROWS + 500)])
    assert _known_rows(store) == ANALYZE_AFTER_ROWS + 500


def test_small_or_proportionate_bulk_inserts_leave_the_statistics_alone(
    store: SqlJobStore,
) -> None:
    _analyze(store)
    store.bulk_insert([JobEntity() for _ in range(ANALYZE_AFTER_ROWS - 1)])  # below the floor
    assert _known_rows(store) == 0
    store.bulk_insert([JobEntity() for _ in range(ANALYZE_AFTER_ROWS + 500)])  # outgrows it
    known = _known_rows(store)
    assert known == 2 * ANALYZE_AFTER_ROWS + 499
    store.bulk_insert([JobEntity() for _ in range(ANALYZE_AFTER_ROWS)])  # fewer than known
    assert _known_rows(store) == known


def test_a_bulk_insert_in_the_caller_s_transaction_does_not_analyze(store: SqlJobStore) -> None:
    _analyze(store)
    with store.engine.connect() as conn:
        conn.begin()
        store.joined(conn).bulk_insert([JobEntity() for _ in range(ANALYZE_AFTER_ROWS + 1)])
        conn.commit()
    assert _known_rows(store) == 0
