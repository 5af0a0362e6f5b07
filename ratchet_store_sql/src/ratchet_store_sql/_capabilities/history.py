"""History partitions (PostgreSQL): archived jobs and execution records by day.

Since migration 0013 ``ratchet_archived_jobs`` is partitioned by range of ``finished_at`` and
``ratchet_executions`` by range of ``started_at``, one partition per UTC day
(``<table>_pYYYYMMDD``) plus ``<table>_default`` for rows outside every daily partition.
:meth:`HistoryOperations.maintain_history` creates the partitions of the coming days and drops
the partitions older than a retention cutoff, so that old history goes with one ``DROP TABLE``
per day instead of a ``DELETE`` per row (and the vacuum of each). On other databases, and on a
PostgreSQL database not partitioned, it does nothing: retention deletes in batches there.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from ratchet_store_sql import schema as s
from ratchet_store_sql._base import SqlBase
from ratchet_store_sql._convert import require_utc

_log = logging.getLogger("ratchet.store.history")

HISTORY_PARTITION_INTERVAL = timedelta(days=1)
"""The width of one history partition (a UTC day)."""
HISTORY_DAYS_AHEAD = 7
"""Days ahead of today for which :meth:`HistoryOperations.maintain_history` keeps a partition."""
PARTITIONED_HISTORY = {s.archived_jobs.name: "finished_at", s.executions.name: "started_at"}
"""The partitioned history tables and their partition column."""
LOCK_TIMEOUT = "5s"
"""How long a partition change waits for the table lock before giving up until the next call
(a retention sweep): it never queues the workers' writes behind it for longer."""


def partition_name(table: str, day: datetime) -> str:
    """The name of the partition of ``table`` for the UTC ``day``."""
    return f"{table}_p{day:%Y%m%d}"


def _day_of(name: str, table: str) -> datetime | None:
    """The day of a daily partition of ``table`` named ``name`` (None for the default one)."""
    suffix = name.removeprefix(f"{table}_p")
    if suffix == name or len(suffix) != 8 or not suffix.isdigit():
        return None
    return datetime.strptime(suffix, "%Y%m%d")


def _floor_day(at: datetime) -> datetime:
    """``at`` (aware UTC) as the naive UTC midnight starting its day."""
    return at.astimezone(UTC).replace(tzinfo=None, hour=0, minute=0, second=0, microsecond=0)


class HistoryOperations(SqlBase):
    _history_partitioned: bool | None = None

    @property
    def history_partition_interval(self) -> timedelta | None:
        """The width of a history partition when the database keeps history in partitions
        (PostgreSQL from migration 0013), else None. Retention rounds its archive cutoff down
        to it, so that old history leaves by whole partitions."""
        return HISTORY_PARTITION_INTERVAL if self._partitioned() else None

    def _partitioned(self) -> bool:
        if not self._d.is_pg:
            return False
        if self._history_partitioned is None:
            with self._read("history_partitioned") as conn:
                found = conn.execute(
                    sa.text(
                        "SELECT count(*) FROM pg_partitioned_table"
                        " WHERE partrelid = to_regclass(:t)"
                    ),
                    {"t": s.executions.name},
                ).scalar_one()
            self._history_partitioned = bool(found)
        return self._history_partitioned

    def history_partitions(self, table: str) -> list[datetime]:
        """The days (naive UTC midnights) of the daily partitions of ``table``, oldest first."""
        if not self._partitioned():
            return []
        with self._read("history_partitions") as conn:
            return self._days(conn, table)

    @staticmethod
    def _days(conn: sa.Connection, table: str) -> list[datetime]:
        names = conn.execute(
            sa.text(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                " WHERE i.inhparent = CAST(:t AS regclass)"
            ),
            {"t": table},
        ).scalars()
        return sorted(d for d in (_day_of(n, table) for n in names) if d is not None)

    def ensure_history_partitions(self, start: datetime, end: datetime) -> int:
        """Create the missing daily partitions of both history tables for every UTC day from
        ``start``'s to ``end``'s (rows of those days waiting in the default partition move
        into them). The number created; 0 where history is not partitioned."""
        require_utc(start, "start")
        require_utc(end, "end")
        if not self._partitioned():
            return 0
        first, last = _floor_day(start), _floor_day(end)
        created = 0
        for table, column in PARTITIONED_HISTORY.items():
            with self._read("history_partitions") as conn:
                have = set(self._days(conn, table))
            day = first
            while day <= last:
                if day not in have:
                    self._attach(table, column, day)
                    created += 1
                day += HISTORY_PARTITION_INTERVAL
        return created

    def _attach(self, table: str, column: str, day: datetime) -> None:
        """One daily partition, created apart and attached (which locks the parent table only
        against other schema changes, not against reads and writes)."""
        name = partition_name(table, day)
        following = day + HISTORY_PARTITION_INTERVAL
        bounds = {"lo": day, "hi": following}
        with self._write("create_history_partition") as conn:
            conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            conn.exec_driver_sql(f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS)")
            conn.execute(
                sa.text(
                    f"WITH moved AS (DELETE FROM {table}_default"
                    f" WHERE {column} >= :lo AND {column} < :hi RETURNING *)"
                    f" INSERT INTO {name} SELECT * FROM moved"
                ),
                bounds,
            )
            conn.exec_driver_sql(
                f"ALTER TABLE {table} ATTACH PARTITION {name}"
                f" FOR VALUES FROM ('{day.isoformat()}') TO ('{following.isoformat()}')"
            )

    def maintain_history(self, cutoff: datetime | None, now: datetime | None = None) -> int:
        """Keep the history partitions: create those of today and the next
        ``HISTORY_DAYS_AHEAD`` days, and with a ``cutoff`` drop every daily partition that
        ends at or before it.

        A dropped archive partition takes its jobs' log lines and any execution records of
        them in the default partition along (in the same transaction). Before an execution
        partition is dropped, its records of jobs still in ``ratchet_jobs`` move to the default
        partition, where they stay until their job is deleted; the records of an archived job
        that finished after the cutoff go with their day (they are older than the horizon
        themselves: an attempt days before the job's last one). Returns
        the number of archived jobs dropped; 0 (nothing done) where history is not partitioned.
        A partition whose lock is not granted within ``LOCK_TIMEOUT`` raises a
        ``TransientStoreError``; the next call takes it up again."""
        if cutoff is not None:
            require_utc(cutoff, "cutoff")
        if not self._partitioned():
            return 0
        if now is None:
            with self._read("server_now") as conn:
                now = conn.execute(sa.select(self._d.now())).scalar_one()
        today = now if now.tzinfo is not None else now.replace(tzinfo=UTC)
        self.ensure_history_partitions(
            today, today + HISTORY_DAYS_AHEAD * HISTORY_PARTITION_INTERVAL
        )
        if cutoff is None:
            return 0
        bound = cutoff.astimezone(UTC).replace(tzinfo=None)
        dropped = 0
        archive = s.archived_jobs.name
        for day in self.history_partitions(archive):
            if day + HISTORY_PARTITION_INTERVAL <= bound:
                dropped += self._drop_archive(partition_name(archive, day))
        executions = s.executions.name
        for day in self.history_partitions(executions):
            if day + HISTORY_PARTITION_INTERVAL <= bound:
                self._drop_executions(
                    partition_name(executions, day), day + HISTORY_PARTITION_INTERVAL
                )
        return dropped

    def _drop_archive(self, name: str) -> int:
        with self._write("drop_history_partition") as conn:
            conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            conn.exec_driver_sql(f"LOCK TABLE {name} IN SHARE MODE")  # no archiving into it
            count = int(conn.exec_driver_sql(f"SELECT count(*) FROM {name}").scalar_one())
            conn.exec_driver_sql(
                f"DELETE FROM {s.job_logs.name} WHERE job_id IN (SELECT id FROM {name})"
            )
            conn.exec_driver_sql(
                f"DELETE FROM {s.executions.name}_default WHERE job_id IN (SELECT id FROM {name})"
            )
            conn.exec_driver_sql(f"DROP TABLE {name}")
        _log.info("dropped history partition %s (%d archived jobs)", name, count)
        return count

    def _drop_executions(self, name: str, end: datetime) -> None:
        table = s.executions.name
        with self._write("drop_history_partition") as conn:
            conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            conn.exec_driver_sql(f"LOCK TABLE {name} IN SHARE MODE")  # no record into it
            # the records to keep (of jobs still in the jobs table, which were created before
            # the partition's day ended: a hash of those few ids, not a probe per record),
            # found before the parent table is locked
            conn.execute(
                sa.text(
                    f"CREATE TEMPORARY TABLE ratchet_kept_executions ON COMMIT DROP AS"
                    f" SELECT * FROM {name} e WHERE e.job_id IN"
                    f" (SELECT j.id FROM {s.jobs.name} j WHERE j.created_at < :end)"
                ),
                {"end": end},
            )
            conn.exec_driver_sql(f"ALTER TABLE {table} DETACH PARTITION {name}")
            kept = conn.exec_driver_sql(  # into the default partition: the range is gone
                f"INSERT INTO {table} SELECT * FROM ratchet_kept_executions"
            ).rowcount
            conn.exec_driver_sql(f"DROP TABLE {name}")
        _log.info("dropped history partition %s (%d execution records kept)", name, kept)


__all__ = [
    "HISTORY_DAYS_AHEAD",
    "HISTORY_PARTITION_INTERVAL",
    "LOCK_TIMEOUT",
    "PARTITIONED_HISTORY",
    "HistoryOperations",
    "partition_name",
]
