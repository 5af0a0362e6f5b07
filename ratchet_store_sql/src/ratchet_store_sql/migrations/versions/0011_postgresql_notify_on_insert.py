"""PostgreSQL: the database wakes the workers when jobs are inserted

Revision ID: 0011
Revises: 0002
Create Date: 2026-12-03 07:10:00

A statement-level ``AFTER INSERT`` trigger on ``ratchet_jobs`` sends one ``NOTIFY ratchet_wakeup``
per execution target among the inserted rows that are PENDING and due (within 5 s, so that a
clock difference between the enqueuing host and the server does not lose a wake-up). PostgreSQL
delivers notifications when the inserting transaction commits and drops them when it rolls
back, so every enqueue (from any process, any language, plain SQL or ``COPY``) wakes idle
workers after its commit, and a rollback wakes nobody. Statement level: a bulk insert of 10,000
jobs costs one trigger call, not 10,000. The payload is the wake-up message of
``ratchet_core.cluster.coordination`` with the source node ``database``. Other databases: nothing (their
workers rely on the Python publisher or polling).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHANNEL = "ratchet_wakeup"

_FUNCTION = f"""
CREATE OR REPLACE FUNCTION ratchet_jobs_notify_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    target text;
BEGIN
    FOR target IN
        SELECT DISTINCT coalesce(execution_target, '')
        FROM ratchet_inserted_jobs
        WHERE status = 'PENDING'
          AND scheduled_at <= (clock_timestamp() AT TIME ZONE 'UTC') + interval '5 seconds'
    LOOP
        PERFORM pg_notify(
            '{CHANNEL}',
            json_build_object('n', 'database', 't', nullif(target, ''))::text
        );
    END LOOP;
    RETURN NULL;
END;
$$
"""

_TRIGGER = """
CREATE TRIGGER ratchet_jobs_notify_inserted
AFTER INSERT ON ratchet_jobs
REFERENCING NEW TABLE AS ratchet_inserted_jobs
FOR EACH STATEMENT EXECUTE FUNCTION ratchet_jobs_notify_inserted()
"""


def _postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    if not _postgresql():
        return
    op.execute(_FUNCTION)
    op.execute("DROP TRIGGER IF EXISTS ratchet_jobs_notify_inserted ON ratchet_jobs")
    op.execute(_TRIGGER)


def downgrade() -> None:
    if not _postgresql():
        return
    op.execute("DROP TRIGGER IF EXISTS ratchet_jobs_notify_inserted ON ratchet_jobs")
    op.execute("DROP FUNCTION IF EXISTS ratchet_jobs_notify_inserted()")
