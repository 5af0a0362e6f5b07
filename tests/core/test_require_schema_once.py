"""`ratchet worker` checks the schema revision once: the CLI's check before it builds the
worker is remembered by the worker's own check at start; health checks read it every time."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import event

from ratchet_api.errors import StoreError
from ratchet_core.runtime.stores import require_schema
from ratchet_store_sql import SqlJobStore


def revision_reads(store: SqlJobStore) -> list[str]:
    reads: list[str] = []

    def seen(conn: object, cursor: object, statement: str, *args: object) -> None:
        if "alembic_version" in statement:
            reads.append(statement)

    event.listen(store.engine, "before_cursor_execute", seen)
    return reads


def test_a_remembered_check_reads_the_revision_once_and_health_reads_it_each_time(
    tmp_path: Path,
) -> None:
    store = SqlJobStore(f"sqlite:///{tmp_path / 'once.db'}", create_schema=True)
    try:
        reads = revision_reads(store)
        require_schema(store, remember=True)
        first = len(reads)
        assert first >= 1
        require_schema(store, remember=True)
        assert len(reads) == first
        require_schema(store)  # health: always asks
        assert len(reads) == 2 * first
    finally:
        store.close()


def test_a_failed_check_is_not_remembered(tmp_path: Path) -> None:
    store = SqlJobStore(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        for _ in range(2):
            with pytest.raises(StoreError, match="has no Ratchet schema yet"):
                require_schema(store, remember=True)
    finally:
        store.close()
