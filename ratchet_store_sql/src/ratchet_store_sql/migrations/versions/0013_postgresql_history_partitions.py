"""PostgreSQL: archived jobs and execution records in daily partitions

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04 15:50:00

``ratchet_archived_jobs`` becomes a table partitioned by range of ``finished_at`` and
``ratchet_executions`` by range of ``started_at`` (declarative partitioning), one partition per
UTC day named ``<table>_pYYYYMMDD`` plus a ``<table>_default`` partition for rows outside every
daily one (and archived jobs without ``finished_at``). Retention then drops whole partitions
older than its horizon (``SqlJobStore.maintain_history``) instead of deleting their rows one by
one; see ``docs/stores/postgresql.md``.

A key of a partitioned table must contain the partition column: the executions' primary key is
``(id, started_at)``; the archive has no primary key but a unique ``(id, finished_at)``
constraint whose index serves the lookups by id (one probe per partition). In one transaction:
the table is renamed, the partitioned one created with the daily partitions covering its rows
from at most 92 days ago to 7 days ahead (older rows go to the default partition), the rows
moved, the old table dropped. The downgrade moves the rows back into plain tables. MySQL,
MariaDB and SQLite: nothing (their retention deletes in batches).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# table -> (partition column, the key of the plain table, the key of the partitioned one)
_TABLES = {
    "ratchet_archived_jobs": (
        "finished_at",
        "CONSTRAINT pk_ratchet_archived_jobs PRIMARY KEY (id)",
        "CONSTRAINT uq_ratchet_archived_jobs_id_finished_at UNIQUE (id, finished_at)",
    ),
    "ratchet_executions": (
        "started_at",
        "CONSTRAINT pk_ratchet_executions PRIMARY KEY (id)",
        "CONSTRAINT pk_ratchet_executions PRIMARY KEY (id, started_at)",
    ),
}
_INDEXES = {
    "ratchet_archived_jobs": ("ix_ratchet_archived_jobs_finished_at", "(finished_at)"),
    "ratchet_executions": ("ix_ratchet_executions_job_id_attempt", "(job_id, attempt)"),
}
_BEHIND = 92
_AHEAD = 7


def _postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def _rename_keys(table: str, suffix: str) -> None:
    """Give the constraints and indexes of ``table`` free names (they are schema-wide)."""
    bind = op.get_bind()
    names = bind.exec_driver_sql(
        "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        f" WHERE i.indrelid = '{table}'::regclass"
    ).scalars()
    constraints = set(
        bind.exec_driver_sql(
            f"SELECT conname FROM pg_constraint WHERE conrelid = '{table}'::regclass"
        ).scalars()
    )
    for name in list(names):
        if name in constraints:
            op.execute(f"ALTER TABLE {table} RENAME CONSTRAINT {name} TO {name}{suffix}")
        else:
            op.execute(f"ALTER INDEX {name} RENAME TO {name}{suffix}")


def _days(table: str, column: str) -> list[datetime]:
    """The UTC days to create a partition for: those of the rows (at most ``_BEHIND`` days
    back) up to ``_AHEAD`` days ahead."""
    today = datetime.now(UTC).replace(tzinfo=None, hour=0, minute=0, second=0, microsecond=0)
    oldest = op.get_bind().exec_driver_sql(f"SELECT min({column}) FROM {table}").scalar()
    first = today
    if oldest is not None:
        first = max(min(oldest, today), today - timedelta(days=_BEHIND))
        first = first.replace(hour=0, minute=0, second=0, microsecond=0)
    return [first + timedelta(days=n) for n in range((today - first).days + _AHEAD + 1)]


def upgrade() -> None:
    if not _postgresql():
        return
    for table, (column, _plain_key, partitioned_key) in _TABLES.items():
        old = f"{table}_unpartitioned"
        op.execute(f"ALTER TABLE {table} RENAME TO {old}")
        _rename_keys(old, "_unpartitioned")
        op.execute(
            f"CREATE TABLE {table} (LIKE {old} INCLUDING DEFAULTS, {partitioned_key})"
            f" PARTITION BY RANGE ({column})"
        )
        index, columns = _INDEXES[table]
        op.execute(f"CREATE INDEX {index} ON {table} {columns}")
        op.execute(f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT")
        for day in _days(old, column):
            following = day + timedelta(days=1)
            op.execute(
                f"CREATE TABLE {table}_p{day:%Y%m%d} PARTITION OF {table}"
                f" FOR VALUES FROM ('{day.isoformat()}') TO ('{following.isoformat()}')"
            )
        op.execute(f"INSERT INTO {table} SELECT * FROM {old}")
        op.execute(f"DROP TABLE {old}")
        op.execute(f"ANALYZE {table}")


def downgrade() -> None:
    if not _postgresql():
        return
    for table, (_column, plain_key, _partitioned_key) in _TABLES.items():
        old = f"{table}_partitioned"
        op.execute(f"ALTER TABLE {table} RENAME TO {old}")
        _rename_keys(old, "_partitioned")
        op.execute(f"CREATE TABLE {table} (LIKE {old} INCLUDING DEFAULTS, {plain_key})")
        index, columns = _INDEXES[table]
        op.execute(f"CREATE INDEX {index} ON {table} {columns}")
        op.execute(f"INSERT INTO {table} SELECT * FROM {old}")
        op.execute(f"DROP TABLE {old}")  # with its partitions
