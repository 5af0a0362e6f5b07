"""Analytics: counts by status and duration percentiles."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta

import sqlalchemy as sa

from ratchet_api.errors import StoreDataError
from ratchet_api.model import (
    JobStatus,
)
from ratchet_store_sql._base import SqlBase
from ratchet_store_sql._capabilities._common import TERMINAL, J
from ratchet_store_sql._convert import (
    require_utc,
)


class AnalyticsOperations(SqlBase):
    def count_jobs_by_status(self) -> dict[JobStatus, int]:
        counts = dict.fromkeys(JobStatus, 0)
        with self._read("count_jobs_by_status") as conn:
            for status, n in conn.execute(
                sa.select(J.c.status, sa.func.count()).group_by(J.c.status)
            ):
                counts[JobStatus(status)] = int(n)
        return counts

    def count_finished_since(self, since: datetime) -> dict[JobStatus, int]:
        require_utc(since, "since")
        counts = {x: 0 for x in JobStatus if x.is_terminal}
        with self._read("count_finished_since") as conn:
            for status, n in conn.execute(
                sa.select(J.c.status, sa.func.count())
                .where(J.c.status.in_(TERMINAL), J.c.finished_at >= since)
                .group_by(J.c.status)
            ):
                counts[JobStatus(status)] = int(n)
        return counts

    def _percentile(
        self,
        operation: str,
        percentile: float,
        start: sa.ColumnElement[datetime],
        end: sa.ColumnElement[datetime],
        where: Sequence[sa.ColumnElement[bool]],
    ) -> timedelta | None:
        if not 0 <= percentile <= 100:
            raise StoreDataError("percentile", f"must be between 0 and 100, got {percentile}")
        # Rank in SQL by the dialect's duration; compute the chosen row's duration exactly
        # from its two datetimes (SQLite's julianday arithmetic is off by microseconds).
        duration = self._d.seconds_between(start, end)
        with self._read(operation) as conn:
            n = conn.execute(sa.select(sa.func.count()).select_from(J).where(*where)).scalar_one()
            if not n:
                return None
            rank = max(1, math.ceil(percentile / 100 * n))
            row = conn.execute(
                sa.select(start, end)
                .where(*where)
                .order_by(duration, J.c.id)
                .offset(rank - 1)
                .limit(1)
            ).one()
        return row[1] - row[0]

    def execution_time_percentile(self, percentile: float, since: datetime) -> timedelta | None:
        require_utc(since, "since")
        return self._percentile(
            "execution_time_percentile",
            percentile,
            J.c.started_at,
            J.c.finished_at,
            [
                J.c.status == JobStatus.SUCCEEDED.value,
                J.c.finished_at >= since,
                J.c.started_at.is_not(None),
            ],
        )

    def queue_wait_percentile(self, percentile: float, since: datetime) -> timedelta | None:
        require_utc(since, "since")
        return self._percentile(
            "queue_wait_percentile",
            percentile,
            J.c.scheduled_at,
            J.c.started_at,
            [J.c.started_at.is_not(None), J.c.started_at >= since],
        )


__all__ = ["AnalyticsOperations"]
