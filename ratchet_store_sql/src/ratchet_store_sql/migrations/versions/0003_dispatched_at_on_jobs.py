"""dispatched_at on jobs and archived jobs

Revision ID: 0003
Revises: 0010
Create Date: 2026-12-03 07:10:00

``dispatched_at`` records when the worker started the current claim of a job
(``JobClaimStore.mark_dispatched``). Recovery of a dead node's jobs gives the attempt back to a
job claimed but never started, so prefetched jobs of a crashed worker do not reach the dead
letter without having run. Existing rows get NULL: a job RUNNING during the upgrade is then
treated as not started if its worker dies (at most one uncounted attempt).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from ratchet_store_sql._types import UtcDateTime

revision: str = "0003"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLES = ("ratchet_jobs", "ratchet_archived_jobs")


def upgrade() -> None:
    for table in _TABLES:
        op.add_column(table, sa.Column("dispatched_at", UtcDateTime(), nullable=True))


def downgrade() -> None:
    for table in _TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("dispatched_at")
