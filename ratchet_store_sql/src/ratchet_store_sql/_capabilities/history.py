"""History partitions (PostgreSQL): archived jobs and execution records by time range.

Since migration 0013 ``ratchet_archived_jobs`` is partitioned by range of ``finished_at`` and
``ratchet_executions`` by range of ``started_at``: one partition per UTC day by default
(``<table>_pYYYYMMDD``), per hour (``<table>_pYYYYMMDDHH``) or per week (named after its first
day) when the store is created with ``history_partition`` (or the URL option
``ratchet_history_partition``), plus ``<table>_default`` for rows outside every partition.
:meth:`HistoryOperations.maintain_history` creates the partitions of the coming period and drops
the partitions older than a retention cutoff, so that old history goes with one ``DROP TABLE``
per partition instead of a ``DELETE`` per row (and the vacuum of each). On other databases, and
on a PostgreSQL database not partitioned, it does nothing: retention deletes in batches there.

A partition's range is read from the catalog, never from its name, so a database whose width
changed keeps its older partitions: new ones begin where those end, and each is dropped when its
own range ends before the cutoff.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from ratchet_api.errors import StoreError
from ratchet_store_sql import schema as s
from ratchet_store_sql._base import SqlBase
from ratchet_store_sql._convert import require_utc
from ratchet_store_sql._engine import HISTORY_PARTITION_NAMES

_log = logging.getLogger("ratchet.store.history")

HISTORY_PARTITION_WIDTHS = dict(
    zip(
        HISTORY_PARTITION_NAMES,
        (timedelta(hours=1), timedelta(days=1), timedelta(days=7)),
        strict=True,
    )
)
"""The widths a history partition may have, by the name the store option takes. Each is a fixed
length aligned to the Unix epoch (UTC; a week starts on a Thursday, as 1970-01-01 did), the same
alignment retention rounds its cutoff to."""
DEFAULT_HISTORY_PARTITION = "day"
HISTORY_PARTITION_INTERVAL = HISTORY_PARTITION_WIDTHS[DEFAULT_HISTORY_PARTITION]
"""The default width of one history partition (a UTC day)."""
HISTORY_DAYS_AHEAD = 7
"""Days ahead of today for which :meth:`HistoryOperations.maintain_history` keeps a partition
(for hourly partitions one day ahead: 24 partitions, not 168)."""
_AHEAD = {
    "hour": timedelta(days=1),
    "day": timedelta(days=HISTORY_DAYS_AHEAD),
    "week": timedelta(days=14),
}
PARTITIONED_HISTORY = {s.archived_jobs.name: "finished_at", s.executions.name: "started_at"}
"""The partitioned history tables and their partition column."""
LOCK_TIMEOUT = "5s"
"""How long a partition change waits for the table lock before giving up until the next call
(a retention sweep): it never queues the workers' writes behind it for longer."""
_EPOCH = datetime(1970, 1, 1)
_BOUNDS = re.compile(r"FROM \('([^']+)'\) TO \('([^']+)'\)")


def history_partition_width(name: str) -> timedelta:
    """The width named ``name`` (``hour``, ``day`` or ``week``); ``StoreError`` naming the
    allowed values for anything else."""
    width = HISTORY_PARTITION_WIDTHS.get(str(name).strip().lower())
    if width is None:
        raise StoreError(
            f"invalid history partition width {name!r}: expected one of "
            f"{', '.join(HISTORY_PARTITION_WIDTHS)}"
        )
    return width


def partition_name(table: str, start: datetime) -> str:
    """The name of the partition of ``table`` starting at ``start`` (naive UTC): its day, and
    its hour too when it does not start at midnight."""
    if start.hour or start.minute:
        return f"{table}_p{start:%Y%m%d%H}"
    return f"{table}_p{start:%Y%m%d}"


def _floor(at: datetime, width: timedelta) -> datetime:
    """``at`` as the naive UTC start of the period of ``width`` holding it (epoch-aligned)."""
    naive = at.astimezone(UTC).replace(tzinfo=None) if at.tzinfo is not None else at
    return _EPOCH + ((naive - _EPOCH) // width) * width


class HistoryOperations(SqlBase):
    _history_partitioned: bool | None = None
    _history_width: timedelta = HISTORY_PARTITION_INTERVAL
    _history_ahead: timedelta = _AHEAD[DEFAULT_HISTORY_PARTITION]

    def _set_history_partition(self, name: str) -> None:
        """Use partitions of the width ``name`` from now on (the store's option)."""
        self._history_width = history_partition_width(name)
        self._history_ahead = _AHEAD[str(name).strip().lower()]

    @property
    def history_partition_interval(self) -> timedelta | None:
        """The width of a history partition when the database keeps history in partitions
        (PostgreSQL from migration 0013), else None. Retention rounds its archive cutoff down
        to it, so that old history leaves by whole partitions."""
        return self._history_width if self._partitioned() else None

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
        """The starts (naive UTC) of the range partitions of ``table``, oldest first."""
        return [start for start, _ in self.history_partition_ranges(table)]

    def history_partition_ranges(self, table: str) -> list[tuple[datetime, datetime]]:
        """The ranges ``[start, end)`` (naive UTC) of the partitions of ``table`` as the
        catalog bounds them, oldest first; the default partition is left out."""
        if not self._partitioned():
            return []
        with self._read("history_partitions") as conn:
            return self._ranges(conn, table)

    @staticmethod
    def _ranges(conn: sa.Connection, table: str) -> list[tuple[datetime, datetime]]:
        bounds = conn.execute(
            sa.text(
                "SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i"
                " JOIN pg_class c ON c.oid = i.inhrelid"
                " WHERE i.inhparent = CAST(:t AS regclass)"
            ),
            {"t": table},
        ).scalars()
        ranges = []
        for bound in bounds:
            found = _BOUNDS.search(bound or "")
            if found is not None:  # not the DEFAULT partition
                lo, hi = (datetime.fromisoformat(v) for v in found.groups())
                ranges.append((lo, hi))
        return sorted(ranges)

    def ensure_history_partitions(self, start: datetime, end: datetime) -> int:
        """Create the missing partitions of both history tables for every period of the
        store's width from ``start``'s to ``end``'s (rows of those periods waiting in the
        default partition move into them). A period that overlaps partitions of another width
        is shortened to the part they leave free. The number created; 0 where history is not
        partitioned."""
        require_utc(start, "start")
        require_utc(end, "end")
        if not self._partitioned():
            return 0
        width = self._history_width
        first, last = _floor(start, width), _floor(end, width)
        created = 0
        for table, column in PARTITIONED_HISTORY.items():
            with self._read("history_partitions") as conn:
                have = self._ranges(conn, table)
            lo = first
            while lo <= last:
                for free_lo, free_hi in _free(lo, lo + width, have):
                    self._attach(table, column, free_lo, free_hi)
                    created += 1
                lo += width
        return created

    def _attach(self, table: str, column: str, lo: datetime, hi: datetime) -> None:
        """One partition for ``[lo, hi)``, created apart and attached (which locks the parent
        table only against other schema changes, not against reads and writes)."""
        name = partition_name(table, lo)
        bounds = {"lo": lo, "hi": hi}
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
                f" FOR VALUES FROM ('{lo.isoformat()}') TO ('{hi.isoformat()}')"
            )

    def maintain_history(self, cutoff: datetime | None, now: datetime | None = None) -> int:
        """Keep the history partitions: create those from now to a period ahead (7 days for
        daily partitions, 1 for hourly, 14 for weekly), and with a ``cutoff`` drop every
        partition that ends at or before it.

        A dropped archive partition takes its jobs' log lines and any execution records of
        them in the default partition along (in the same transaction). Before an execution
        partition is dropped, its records of jobs still in ``ratchet_jobs`` move to the default
        partition, where they stay until their job is deleted; the records of an archived job
        that finished after the cutoff go with their partition (they are older than the
        horizon themselves: an attempt before the job's last one). Returns
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
        self.ensure_history_partitions(today, today + self._history_ahead)
        if cutoff is None:
            return 0
        bound = cutoff.astimezone(UTC).replace(tzinfo=None)
        dropped = 0
        archive = s.archived_jobs.name
        for lo, hi in self.history_partition_ranges(archive):
            if hi <= bound:
                dropped += self._drop_archive(partition_name(archive, lo))
        executions = s.executions.name
        for lo, hi in self.history_partition_ranges(executions):
            if hi <= bound:
                self._drop_executions(partition_name(executions, lo), hi)
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


def _free(
    lo: datetime, hi: datetime, have: list[tuple[datetime, datetime]]
) -> list[tuple[datetime, datetime]]:
    """The parts of ``[lo, hi)`` that no range of ``have`` (sorted) covers."""
    free = []
    for h_lo, h_hi in have:
        if h_hi <= lo or h_lo >= hi:
            continue
        if h_lo > lo:
            free.append((lo, h_lo))
        lo = max(lo, h_hi)
        if lo >= hi:
            break
    if lo < hi:
        free.append((lo, hi))
    return free


__all__ = [
    "DEFAULT_HISTORY_PARTITION",
    "HISTORY_DAYS_AHEAD",
    "HISTORY_PARTITION_INTERVAL",
    "HISTORY_PARTITION_WIDTHS",
    "LOCK_TIMEOUT",
    "PARTITIONED_HISTORY",
    "HistoryOperations",
    "history_partition_width",
    "partition_name",
]
