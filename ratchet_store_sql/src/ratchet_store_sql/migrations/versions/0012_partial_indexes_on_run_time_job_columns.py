"""partial indexes on the job columns a run sets

Revision ID: 0012
Revises: 0009
Create Date: 2026-12-04 06:45:00

``started_at``, ``heartbeat_at`` and ``finished_at`` are NULL from a job's enqueue until a worker
runs it. Indexed in full, every enqueue wrote an entry for each of them that no query looks up:
on SQLite a single enqueue wrote 10 WAL frames (Huey's writes 2), and every frame counts
towards the next checkpoint. On PostgreSQL and SQLite these indexes now cover only the rows
where the column is set; every query using them compares the column with a value (``<``,
``>=``, ``IS NOT NULL``), which implies ``IS NOT NULL``, so the planners still use them.
MySQL/MariaDB have no partial indexes: unchanged there.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INDEXES = (
    ("ix_ratchet_jobs_status_heartbeat_at", ["status", "heartbeat_at"], "heartbeat_at"),
    ("ix_ratchet_jobs_status_finished_at", ["status", "finished_at"], "finished_at"),
    ("ix_ratchet_jobs_status_started_at", ["status", "started_at"], "started_at"),
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
