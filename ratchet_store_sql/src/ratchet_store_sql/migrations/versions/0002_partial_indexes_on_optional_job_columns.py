"""partial indexes on the optional job columns

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 15:55:00

``signal_key``, ``parent_id``, ``batch_id`` and ``signal_deadline`` are NULL for most jobs.
Indexed in full, every insert and every status change of such a job (claim, completion: the
row moves, so every index gets a new entry) also writes four index entries nobody looks up.
On PostgreSQL and SQLite these indexes now cover only the rows where the column is set; every
query using them compares the column with a value, which implies ``IS NOT NULL``, so the
planners still use them. MySQL/MariaDB have no partial indexes: unchanged there.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INDEXES = (
    ("ix_ratchet_jobs_signal_key", ["signal_key"], "signal_key"),
    ("ix_ratchet_jobs_parent_id", ["parent_id"], "parent_id"),
    ("ix_ratchet_jobs_batch_id", ["batch_id"], "batch_id"),
    ("ix_ratchet_jobs_status_signal_deadline", ["status", "signal_deadline"], "signal_deadline"),
)


def _partial_supported() -> bool:
    return op.get_bind().dialect.name in ("postgresql", "sqlite")


def upgrade() -> None:
    if not _partial_supported():
        return
    for name, columns, column in _INDEXES:
        op.drop_index(name, table_name="ratchet_jobs")
        where = sa.text(f"{column} IS NOT NULL")
        op.create_index(
            name,
            "ratchet_jobs",
            columns,
            unique=False,
            postgresql_where=where,
            sqlite_where=where,
        )


def downgrade() -> None:
    if not _partial_supported():
        return
    for name, columns, _column in _INDEXES:
        op.drop_index(name, table_name="ratchet_jobs")
        op.create_index(name, "ratchet_jobs", columns, unique=False)
