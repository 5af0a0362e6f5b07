"""the owner index covers only claimed jobs

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-04 19:20:00

``owner`` is NULL from a job's enqueue until a worker claims it, and again after a reset to
PENDING. Indexed in full, every enqueue wrote an ``(owner, status)`` entry that no query looks
up: one more WAL frame per single enqueue on SQLite, one more index insertion (and its WAL) on
PostgreSQL. On PostgreSQL and SQLite the index now covers only the rows with an owner; the
queries reading it (a node's running jobs, the orphan reset by node) compare ``owner`` with a
value (``=``, ``IN``), which implies ``IS NOT NULL``, so both planners still use it.
MySQL/MariaDB have no partial indexes: unchanged there.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NAME = "ix_ratchet_jobs_owner_status"


def _partial_supported() -> bool:
    return op.get_bind().dialect.name in ("postgresql", "sqlite")


def upgrade() -> None:
    if not _partial_supported():
        return
    op.drop_index(NAME, table_name="ratchet_jobs")
    where = sa.text("owner IS NOT NULL")
    op.create_index(
        NAME,
        "ratchet_jobs",
        ["owner", "status"],
        unique=False,
        postgresql_where=where,
        sqlite_where=where,
    )


def downgrade() -> None:
    if not _partial_supported():
        return
    op.drop_index(NAME, table_name="ratchet_jobs")
    op.create_index(NAME, "ratchet_jobs", ["owner", "status"], unique=False)
