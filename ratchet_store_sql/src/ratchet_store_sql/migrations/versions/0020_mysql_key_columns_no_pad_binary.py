"""MySQL/MariaDB: every text column of Ratchet's tables compares byte by byte

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05 01:40:00

The baseline created the tables' text columns without a collation, so on MySQL/MariaDB they took
the database's default: usually case-insensitive (``utf8mb4_general_ci``). The idempotency keys
``Order-1`` and ``order-1`` were then one key (the second job silently taken for a duplicate and
never run), tags, lock, batch and recurring names merged by case, and the compare-and-set writes
that match a stored value (job state versions, key rotation's rewrite of sealed values) matched
a value differing only by case. The two columns created later with ``utf8mb4_bin`` (fairness
keys, rate-limit keys) were case-sensitive but PAD SPACE: ``'a'`` and ``'a '`` were one key.

This revision converts every Ratchet table to the server's byte-wise NO PAD collation
(``_types.key_collation``: ``utf8mb4_nopad_bin`` on MariaDB, ``utf8mb4_0900_bin`` on MySQL
8.0.17+), which also becomes the table default for columns added later. No stored value
changes, and no two stored values become equal (the new collation only tells more values apart).
The server rebuilds each table (one ``ALTER TABLE ... CONVERT TO`` per table): on a big
``ratchet_jobs`` run it in a quiet moment. PostgreSQL and SQLite compare text byte-wise already:
nothing changes there. Tests run on a database created with the server's default collation."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from ratchet_store_sql._types import LEGACY_KEY_COLLATION, key_collation

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = (
    "ratchet_jobs",
    "ratchet_archived_jobs",
    "ratchet_executions",
    "ratchet_job_logs",
    "ratchet_job_properties",
    "ratchet_job_state",
    "ratchet_job_tags",
    "ratchet_batches",
    "ratchet_locks",
    "ratchet_nodes",
    "ratchet_rate_limits",
    "ratchet_recurring_jobs",
    "ratchet_resource_permits",
    "ratchet_workflow_conditions",
)
"""Every Ratchet table as of this revision (the version table aside)."""

_CREATED_BINARY = {
    "ratchet_jobs": ["fairness_key"],
    "ratchet_archived_jobs": ["fairness_key"],
    "ratchet_rate_limits": ["key"],
}
"""The ``VARCHAR(255)`` columns created ``utf8mb4_bin`` before this revision (downgrade)."""


def _convert(table: str, collation: str) -> None:
    quote = op.get_bind().dialect.identifier_preparer.quote
    op.execute(f"ALTER TABLE {quote(table)} CONVERT TO CHARACTER SET utf8mb4 COLLATE {collation}")


def _mysql() -> bool:
    return op.get_bind().dialect.name in ("mysql", "mariadb")


def upgrade() -> None:
    if not _mysql():
        return
    collation = key_collation(op.get_bind().dialect)
    for table in TABLES:  # every text column, and the table's default for columns added later
        _convert(table, collation)


def downgrade() -> None:
    if not _mysql():
        return
    bind = op.get_bind()
    default = bind.execute(sa.text("SELECT @@collation_database")).scalar_one()
    for table in TABLES:
        _convert(table, default)
    quote = bind.dialect.identifier_preparer.quote
    for table, columns in _CREATED_BINARY.items():
        null = "NOT NULL" if table == "ratchet_rate_limits" else "NULL"
        changes = ", ".join(
            f"MODIFY {quote(c)} VARCHAR(255) CHARACTER SET utf8mb4 COLLATE {LEGACY_KEY_COLLATION}"
            f" {null}"
            for c in columns
        )
        op.execute(f"ALTER TABLE {quote(table)} {changes}")
