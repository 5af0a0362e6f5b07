"""integer job priorities: the four levels become named points of -100..100

Revision ID: 0009
Revises: 0005
Create Date: 2026-12-03 07:40:00

A job's priority is now any int from -100 to 100 (Django Tasks' range). The four named levels
move to points of it: LOW 0 -> -50, NORMAL 5 -> 0, HIGH 10 -> 50, CRITICAL 15 -> 100, in every
table that keeps a priority (jobs, archived jobs, recurring definitions). One UPDATE per table,
inside the migration's transaction. The column type (INTEGER) does not change. Downgrade maps
each value to the nearest old level.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLES = ("ratchet_jobs", "ratchet_archived_jobs", "ratchet_recurring_jobs")
_UP = ((0, -50), (5, 0), (10, 50), (15, 100))


def _table(name: str) -> sa.TableClause:
    return sa.table(name, sa.column("priority", sa.Integer()))


def upgrade() -> None:
    for name in _TABLES:
        table = _table(name)
        column = table.c.priority
        mapped = sa.case(*((column == old, new) for old, new in _UP), else_=column)
        op.execute(table.update().values(priority=mapped))


def downgrade() -> None:
    for name in _TABLES:
        table = _table(name)
        column = table.c.priority
        mapped = sa.case((column < -25, 0), (column < 25, 5), (column < 75, 10), else_=15)
        op.execute(table.update().values(priority=mapped))
