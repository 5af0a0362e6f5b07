"""Queue statistics (``QueueStatsStore``): one statement, one branch per status, each through
an index that leads with ``status`` (the partial claim index for PENDING, the status indexes
for RUNNING and for finished jobs)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ratchet_api.errors import StoreDataError
from ratchet_api.model import JobPriority, JobStatus
from ratchet_api.store.queues import BAND_BOUNDS, QueueCounts, QueueStats, rows_from_counts
from ratchet_store_sql._base import SqlBase
from ratchet_store_sql._capabilities._common import J
from ratchet_store_sql._convert import require_utc
from ratchet_store_sql._dialects.base import UTC_TYPE


def _band() -> sa.ColumnElement[int]:
    # literal (not bound) constants: the expression renders the same in SELECT and GROUP BY
    low, normal, high = (sa.literal_column(str(b), sa.Integer()) for b in BAND_BOUNDS)
    return sa.case(
        (J.c.priority < low, sa.literal_column(str(int(JobPriority.LOW)))),
        (J.c.priority < normal, sa.literal_column(str(int(JobPriority.NORMAL)))),
        (J.c.priority < high, sa.literal_column(str(int(JobPriority.HIGH)))),
        else_=sa.literal_column(str(int(JobPriority.CRITICAL))),
    )


def _zero(name: str) -> sa.Label[int]:
    return sa.literal_column("0", sa.Integer()).label(name)


def _no_time(name: str) -> sa.Label[Any]:
    # typed: PostgreSQL resolves a column of untyped NULLs to text before the clock's timestamp
    return sa.cast(sa.null(), UTC_TYPE).label(name)


def _flag(condition: sa.ColumnElement[bool]) -> sa.ColumnElement[int]:
    return sa.func.sum(sa.case((condition, 1), else_=0))


class QueueStatsOperations(SqlBase):
    def queue_stats_statement(
        self, finished_since: datetime | None = None
    ) -> sa.CompoundSelect[Any]:
        """The statement ``queue_stats`` runs (for ``EXPLAIN``): PENDING, RUNNING and, with
        ``finished_since``, finished jobs grouped by execution target, target and band, then
        one row with the database clock."""
        now = self._d.now()
        band = _band().label("band")
        keys = (J.c.execution_target, J.c.target)
        group = (J.c.execution_target, J.c.target, _band())
        due = J.c.scheduled_at <= now
        branches: list[sa.Select[Any]] = [
            sa.select(
                *keys,
                band,
                sa.func.count().label("pending"),
                _flag(due).label("due"),
                sa.func.min(sa.case((due, J.c.scheduled_at), else_=None)).label("oldest"),
                _zero("running"),
                _zero("succeeded"),
                _zero("failed"),
                _no_time("clock"),
            )
            .where(J.c.status == JobStatus.PENDING.value)
            .group_by(*group),
            sa.select(
                *keys,
                band,
                _zero("pending"),
                _zero("due"),
                _no_time("oldest"),
                sa.func.count().label("running"),
                _zero("succeeded"),
                _zero("failed"),
                _no_time("clock"),
            )
            .where(J.c.status == JobStatus.RUNNING.value)
            .group_by(*group),
        ]
        if finished_since is not None:
            branches.append(
                sa.select(
                    *keys,
                    band,
                    _zero("pending"),
                    _zero("due"),
                    _no_time("oldest"),
                    _zero("running"),
                    _flag(J.c.status == JobStatus.SUCCEEDED.value).label("succeeded"),
                    _flag(J.c.status == JobStatus.FAILED.value).label("failed"),
                    _no_time("clock"),
                )
                .where(
                    J.c.status.in_([JobStatus.SUCCEEDED.value, JobStatus.FAILED.value]),
                    J.c.finished_at >= finished_since,
                )
                .group_by(*group)
            )
        branches.append(
            sa.select(
                sa.type_coerce(sa.null(), J.c.execution_target.type).label("execution_target"),
                sa.literal_column("''", J.c.target.type).label("target"),
                sa.type_coerce(sa.null(), sa.Integer()).label("band"),
                _zero("pending"),
                _zero("due"),
                _no_time("oldest"),
                _zero("running"),
                _zero("succeeded"),
                _zero("failed"),
                now.label("clock"),
            )
        )
        return sa.union_all(*branches)

    def queue_stats(self, finished_since: datetime | None = None) -> QueueStats:
        require_utc(finished_since, "finished_since")
        statement = self.queue_stats_statement(finished_since)
        counted: dict[tuple[str | None, str, JobPriority], QueueCounts] = {}
        clock: datetime | None = None
        with self._read("queue_stats") as conn:
            rows = conn.execute(statement).all()
        for row in rows:
            if row.clock is not None:
                clock = row.clock
                continue
            key = (row.execution_target, row.target, JobPriority(int(row.band)))
            counts = QueueCounts(
                pending=int(row.pending or 0),
                due=int(row.due or 0),
                oldest_due_at=row.oldest,
                running=int(row.running or 0),
                succeeded=int(row.succeeded or 0),
                failed=int(row.failed or 0),
            )
            counted[key] = counted[key] + counts if key in counted else counts
        if clock is None:  # pragma: no cover - the clock branch always returns its row
            raise StoreDataError("queue_stats", "the database clock row is missing")
        return QueueStats(
            now=clock, rows=rows_from_counts(counted.items()), finished_since=finished_since
        )


__all__ = ["QueueStatsOperations"]
