"""The schema names its dialect-specific parts without importing SQLAlchemy's dialects (issue 23):
a worker loads the dialect of its own database only, and the DDL is what it was."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.schema import CreateIndex, CreateTable

from ratchet_store_sql import schema

PARTIAL = {
    "ix_ratchet_jobs_claim": "status = 'PENDING'",
    "ix_ratchet_jobs_fair_claim": "status = 'PENDING'",
    "ix_ratchet_jobs_batch_id": "batch_id IS NOT NULL",
    "ix_ratchet_jobs_parent_id": "parent_id IS NOT NULL",
    "ix_ratchet_jobs_signal_key": "signal_key IS NOT NULL",
    "ix_ratchet_jobs_status_signal_deadline": "signal_deadline IS NOT NULL",
    "ix_ratchet_jobs_status_heartbeat_at": "heartbeat_at IS NOT NULL",
    "ix_ratchet_jobs_status_finished_at": "finished_at IS NOT NULL",
    "ix_ratchet_jobs_status_started_at": "started_at IS NOT NULL",
}


def test_importing_the_store_and_its_schema_loads_no_sqlalchemy_dialect() -> None:
    code = """
        import sys
        import ratchet_store_sql, ratchet_store_sql.store, ratchet_store_sql.schema
        from ratchet_store_sql.migration import shipped_head_revision
        shipped_head_revision()
        print(sorted(m for m in sys.modules if m.startswith("sqlalchemy.dialects.")))
        """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def _index(name: str) -> sa.Index:
    return next(i for i in schema.jobs.indexes if i.name == name)


def test_partial_indexes_are_partial_on_postgresql_and_sqlite_and_full_on_mysql() -> None:
    for name, where in PARTIAL.items():
        index = _index(name)
        for dialect in (postgresql.dialect(), sqlite.dialect()):
            assert str(CreateIndex(index).compile(dialect=dialect)).endswith(f" WHERE {where}")
        assert "WHERE" not in str(CreateIndex(index).compile(dialect=mysql.dialect()))
        assert set(index.dialect_kwargs) == {"postgresql_where", "sqlite_where"}
    assert "WHERE" not in str(CreateIndex(_index("ix_ratchet_jobs_target")).compile())


def test_a_copy_of_the_jobs_table_keeps_the_partial_indexes() -> None:
    copy = schema.jobs.to_metadata(sa.MetaData())
    for index in copy.indexes:
        if index.name in PARTIAL:
            ddl = str(CreateIndex(index).compile(dialect=postgresql.dialect()))
            assert ddl.endswith(f" WHERE {PARTIAL[index.name]}")


def test_mysql_columns_are_longtext_binary_collated_varchar_and_datetime6() -> None:
    ddl = str(CreateTable(schema.jobs).compile(dialect=mysql.dialect()))
    assert "payload LONGTEXT NOT NULL" in ddl
    assert "owner VARCHAR(255) COLLATE utf8mb4_bin" in ddl  # a MySQL of unknown version
    assert "target VARCHAR(512) COLLATE utf8mb4_bin" in ddl
    assert "scheduled_at DATETIME(6) NOT NULL" in ddl
    pg = str(CreateTable(schema.jobs).compile(dialect=postgresql.dialect()))
    assert "payload TEXT NOT NULL" in pg and "owner VARCHAR(255)," in pg


def test_key_columns_take_the_servers_no_pad_binary_collation() -> None:
    """MariaDB's ``utf8mb4_bin`` and MySQL's are PAD SPACE ('a' = 'a '): each server gets its
    NO PAD binary collation, and only a MySQL older than 8.0.17, which has none, the PAD one."""
    mariadb = mysql.dialect()
    mariadb.is_mariadb = True
    mysql8 = mysql.dialect()
    mysql8.server_version_info = (8, 0, 36)
    mysql57 = mysql.dialect()
    mysql57.server_version_info = (5, 7, 44)
    expected = {
        mariadb: "utf8mb4_nopad_bin",
        mysql8: "utf8mb4_0900_bin",
        mysql57: "utf8mb4_bin",
    }
    for dialect, collation in expected.items():
        ddl = str(CreateTable(schema.locks).compile(dialect=dialect))
        assert f"name VARCHAR(255) COLLATE {collation} NOT NULL" in ddl
