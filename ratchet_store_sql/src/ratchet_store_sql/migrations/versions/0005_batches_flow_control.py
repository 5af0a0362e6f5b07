"""batches and flow control: batch errors, job flow-control options, rate-limit buckets

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 07:20:00

* ``ratchet_batches.last_error``: why the last chunk of a streaming batch failed.
* ``ratchet_jobs.flow_control`` / ``ratchet_archived_jobs.flow_control``: the job's permit count
  and rate limit (JSON written by the engine; NULL for jobs without flow control).
* ``ratchet_rate_limits``: one token bucket per rate-limit key, refilled on the database clock.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import ratchet_store_sql._types
from ratchet_store_sql._types import long_text

# the key column as this revision created it (0020 gives it the NO PAD collation)
_BINARY_KEY = sa.String(255).with_variant(
    sa.String(255, collation="utf8mb4_bin"), "mysql", "mariadb"
)

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("ratchet_batches", sa.Column("last_error", long_text(), nullable=True))
    for table in ("ratchet_jobs", "ratchet_archived_jobs"):
        op.add_column(table, sa.Column("flow_control", sa.Text(), nullable=True))
    op.create_table(
        "ratchet_rate_limits",
        sa.Column("key", _BINARY_KEY, nullable=False),
        sa.Column("tokens", sa.Float(), nullable=False),
        sa.Column("refreshed_at", ratchet_store_sql._types.UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_ratchet_rate_limits")),
    )


def downgrade() -> None:
    op.drop_table("ratchet_rate_limits")
    for table in ("ratchet_archived_jobs", "ratchet_jobs"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("flow_control")
    with op.batch_alter_table("ratchet_batches") as batch:
        batch.drop_column("last_error")
