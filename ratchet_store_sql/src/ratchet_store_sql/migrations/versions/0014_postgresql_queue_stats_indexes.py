"""PostgreSQL: covering partial indexes for the queue statistics

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04 16:05:00

``QueueStatsStore.queue_stats`` (Prometheus gauges, autoscalers, the dashboard's queues page)
groups PENDING and RUNNING jobs by execution target, job target and priority band. The claim
index has neither target column, so with 100,000 PENDING jobs among 1,100,000 rows PostgreSQL
read the whole table (parallel seq scan, 1.7 s). These partial indexes hold every column the
query reads, so each branch is an index-only scan (0.12 s on the same table). An enqueue writes
one entry into the PENDING one and a claim one into the RUNNING one (a claim changes
``status``, an indexed column, so it is never a HOT update anyway).

PostgreSQL only: SQLite serves one host and keeps its enqueue writes minimal (a full scan of
its table is what a scrape costs there), and MySQL/MariaDB cannot index ``target`` and
``execution_target`` together (3,072-byte key limit); both read the claim index's status range.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES = (
    (
        "ix_ratchet_jobs_pending_queues",
        ["execution_target", "target", "priority", "scheduled_at"],
        "PENDING",
    ),
    ("ix_ratchet_jobs_running_queues", ["execution_target", "target", "priority"], "RUNNING"),
)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name, columns, status in INDEXES:
        op.create_index(
            name,
            "ratchet_jobs",
            columns,
            unique=False,
            postgresql_where=sa.text(f"status = '{status}'"),
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name, _columns, _status in INDEXES:
        op.drop_index(name, table_name="ratchet_jobs")
