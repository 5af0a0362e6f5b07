"""job column ``workflow``: the engine's JSON about a job's place in a workflow

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 07:10:00

Set only for jobs of a workflow (a parent whose steps or callbacks wait for it, a step that waits
for a signal): whether other jobs wait for the job, its signal timeout and timeout action.
Nullable text on the hot table and on the archive (which keeps every job column).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLES = ("ratchet_jobs", "ratchet_archived_jobs")


def upgrade() -> None:
    for table in _TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("workflow", sa.Text(), nullable=True))


def downgrade() -> None:
    for table in _TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("workflow")
