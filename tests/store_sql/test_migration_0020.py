"""Migration 0020 gives every text column of MySQL/MariaDB's Ratchet tables a byte-wise NO PAD
collation on a database whose default collation folds case (``utf8mb4_general_ci``, as a plain ``CREATE DATABASE ...
CHARACTER SET utf8mb4`` makes it), keeping every stored row, and back."""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib import resources

import pytest
import sqlalchemy as sa

from ratchet_store_sql import SqlJobStore
from tests import servers

_SCRIPT = "0020_mysql_key_columns_no_pad_binary.py"
_spec = importlib.util.spec_from_file_location(
    "m0020", str(resources.files("ratchet_store_sql") / "migrations" / "versions" / _SCRIPT)
)
assert _spec is not None and _spec.loader is not None
m0020 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(m0020)


@pytest.fixture
def store() -> Iterator[SqlJobStore]:
    url = servers.create_mariadb_database()  # its own: this test walks the revisions
    opened = SqlJobStore(url)
    yield opened
    opened.close()
    servers.drop_mariadb_database(url)


def _collations(conn: sa.Connection) -> dict[tuple[str, str], str]:
    rows = conn.execute(
        sa.text(
            "SELECT table_name, column_name, collation_name FROM information_schema.columns"
            " WHERE table_schema = DATABASE() AND collation_name IS NOT NULL"
        )
    )
    return {(t, c): coll for t, c, coll in rows}


def test_0020_makes_text_columns_no_pad_binary_and_keeps_rows(store: SqlJobStore) -> None:
    store.schema.upgrade("0019")
    now = datetime.now(UTC).replace(tzinfo=None)
    job_id = uuid.uuid4()
    with store.engine.begin() as conn:
        assert conn.execute(sa.text("SELECT @@collation_database")).scalar() == (
            "utf8mb4_general_ci"
        )
        before = _collations(conn)
        assert before[("ratchet_jobs", "idempotency_key")] == "utf8mb4_general_ci"
        assert before[("ratchet_rate_limits", "key")] == "utf8mb4_bin"
        conn.execute(
            sa.text(
                "INSERT INTO ratchet_jobs (id, status, priority, job_type, target, payload,"
                " scheduled_at, created_at, updated_at, attempt, max_retries, claim_seq,"
                " idempotency_key)"
                " VALUES (:id, 'PENDING', 0, 'STANDARD', 'm:f', '{}', :now, :now, :now,"
                " 0, 3, 0, 'Order-1 ')"
            ),
            {"id": job_id.hex, "now": now},
        )

    store.schema.upgrade("0020")
    with store.engine.connect() as conn:
        after = _collations(conn)
        assert {t for t, _c in after if t != "ratchet_alembic_version"} == set(m0020.TABLES)
        assert set(after.values()) == {"utf8mb4_nopad_bin", "utf8mb4_general_ci"}
        assert {key for key, coll in after.items() if coll != "utf8mb4_nopad_bin"} == {
            ("ratchet_alembic_version", "version_num")
        }
        keys = conn.execute(sa.text("SELECT idempotency_key FROM ratchet_jobs")).scalars().all()
        assert keys == ["Order-1 "]
        match = "SELECT count(*) FROM ratchet_jobs WHERE idempotency_key = :k"
        counts = [conn.execute(sa.text(match), {"k": k}).scalar() for k in ("order-1 ", "Order-1")]
        assert counts == [0, 0], "neither case nor a trailing space matches another key"

    store.schema.downgrade("0019")
    with store.engine.connect() as conn:
        assert _collations(conn) == before
