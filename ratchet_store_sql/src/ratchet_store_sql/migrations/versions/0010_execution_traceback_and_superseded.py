"""execution records: the sanitized traceback and whether the attempt was superseded

Revision ID: 0010
Revises: 0011
Create Date: 2026-12-03 07:30:00

``traceback`` keeps the sanitized traceback of a failed attempt (shown by ``ratchet jobs show``).
``superseded`` marks an attempt whose outcome was not written because its claim had been
superseded (cancelled, or recovered and claimed again, while it ran); existing rows are not.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from ratchet_store_sql._types import long_text

revision: str = "0010"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("ratchet_executions") as batch:
        batch.add_column(sa.Column("traceback", long_text(), nullable=True))
        batch.add_column(
            sa.Column("superseded", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("ratchet_executions") as batch:
        batch.drop_column("superseded")
        batch.drop_column("traceback")
