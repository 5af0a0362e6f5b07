"""job column ``fairness_key``: the group a job is claimed fairly within (e.g. a tenant)

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04 16:30:00

Claims interleave the fairness keys of due jobs of equal priority (``FairClaimStore``), so one
tenant's burst does not starve the others. Nullable on the hot table and on the archive (which
keeps every job column; on PostgreSQL the column reaches every history partition through the
partitioned parent). The index ``(status, fairness_key)`` answers the claim's probe "is any
PENDING job keyed?" (a claim without keyed jobs keeps the plain statement); partial on
PostgreSQL and SQLite, so an unkeyed enqueue writes no entry into it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# the column as this revision created it (0020 gives it the NO PAD collation)
_BINARY_KEY = sa.String(255).with_variant(
    sa.String(255, collation="utf8mb4_bin"), "mysql", "mariadb"
)

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLES = ("ratchet_jobs", "ratchet_archived_jobs")
INDEX = "ix_ratchet_jobs_status_fairness_key"


def upgrade() -> None:
    for table in _TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("fairness_key", _BINARY_KEY, nullable=True))
    where = sa.text("fairness_key IS NOT NULL")
    op.create_index(
        INDEX,
        "ratchet_jobs",
        ["status", "fairness_key"],
        unique=False,
        postgresql_where=where,
        sqlite_where=where,
    )


def downgrade() -> None:
    op.drop_index(INDEX, table_name="ratchet_jobs")
    for table in _TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("fairness_key")
