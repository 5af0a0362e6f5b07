"""Queue statistics: what ``QueueStatsStore.queue_stats`` returns (autoscalers, the Prometheus
collector and the dashboard's queues page read the same figures).

A store answers with one row per ``(execution_target, target, priority band)`` that has any
job counted; the reader groups the rows as it needs (per execution target, per job target, per
band, in total). Sums group exactly; the oldest due time of a group is the minimum of its rows.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import attrs

from ratchet_api.model import JobPriority, JobStatus, require_utc
from ratchet_api.store.entities import JobEntity

K = TypeVar("K", bound=Hashable)

PRIORITY_BANDS: tuple[JobPriority, ...] = (
    JobPriority.LOW,
    JobPriority.NORMAL,
    JobPriority.HIGH,
    JobPriority.CRITICAL,
)
"""The bands a job's priority (-100..100) is counted in, each named by its point."""

BAND_BOUNDS: tuple[int, int, int] = (-25, 25, 75)
"""Where one band ends and the next begins: a priority below -25 is LOW, below 25 NORMAL, below
75 HIGH, else CRITICAL (half-way between the named points, so ``priority_band`` is monotonic).
Stores compute the band in their query with these bounds."""


def priority_band(priority: int) -> JobPriority:
    """The band of ``priority``: the named ``JobPriority`` it is nearest to (ties go up)."""
    low, normal, high = BAND_BOUNDS
    if priority < low:
        return JobPriority.LOW
    if priority < normal:
        return JobPriority.NORMAL
    if priority < high:
        return JobPriority.HIGH
    return JobPriority.CRITICAL


def _utc_or_none(_: object, attribute: attrs.Attribute[Any], value: datetime | None) -> None:
    require_utc(value, attribute.name)


@attrs.frozen(kw_only=True)
class QueueCounts:
    """The figures of one group of jobs."""

    pending: int = 0
    """PENDING jobs, due or scheduled later."""
    due: int = 0
    """PENDING jobs whose ``scheduled_at`` is at or before the store's clock (claimable now,
    flow control aside)."""
    oldest_due_at: datetime | None = attrs.field(default=None, validator=_utc_or_none)
    """The earliest ``scheduled_at`` of the due jobs (None: nothing due)."""
    running: int = 0
    """RUNNING jobs (claimed by a worker)."""
    succeeded: int = 0
    """SUCCEEDED jobs finished at or after ``QueueStats.finished_since`` (0 without it)."""
    failed: int = 0
    """FAILED jobs finished at or after ``QueueStats.finished_since`` (0 without it)."""

    def __add__(self, other: QueueCounts) -> QueueCounts:
        oldest = [t for t in (self.oldest_due_at, other.oldest_due_at) if t is not None]
        return QueueCounts(
            pending=self.pending + other.pending,
            due=self.due + other.due,
            oldest_due_at=min(oldest) if oldest else None,
            running=self.running + other.running,
            succeeded=self.succeeded + other.succeeded,
            failed=self.failed + other.failed,
        )

    def counts(self) -> QueueCounts:
        """The figures alone (a ``QueueStatsRow`` without its keys)."""
        return QueueCounts(
            pending=self.pending,
            due=self.due,
            oldest_due_at=self.oldest_due_at,
            running=self.running,
            succeeded=self.succeeded,
            failed=self.failed,
        )


@attrs.frozen(kw_only=True)
class QueueStatsRow(QueueCounts):
    """The figures of the jobs of one execution target, job target and priority band."""

    execution_target: str | None
    """The execution target label (None: jobs without one, run by any worker)."""
    target: str
    """The job target (the function's import path)."""
    priority_band: JobPriority
    """The band of the jobs' priorities (``priority_band``)."""


@attrs.frozen(kw_only=True)
class QueueStats:
    """Queue figures read at one instant of the store's clock."""

    now: datetime = attrs.field(validator=_utc_or_none)
    """The store's clock when the figures were read (due and ages are relative to it)."""
    rows: tuple[QueueStatsRow, ...] = ()
    finished_since: datetime | None = attrs.field(default=None, validator=_utc_or_none)
    """Start of the window of ``succeeded`` and ``failed`` (None: not counted)."""
    exact: bool = True
    """False when the figures come from a bounded scan of the newest jobs (a store without
    ``QueueStatsStore``): they are then those of the ``scanned`` rows only."""
    scanned: int | None = None
    """Rows read by such a scan (None for a store's own query)."""

    def total(self) -> QueueCounts:
        """Every row added up."""
        total = QueueCounts()
        for row in self.rows:
            total = total + row
        return total.counts()

    def grouped(self, key: Callable[[QueueStatsRow], K]) -> dict[K, QueueCounts]:
        """The rows added up per ``key(row)``, e.g.
        ``stats.grouped(lambda r: (r.execution_target, r.priority_band))``."""
        groups: dict[K, QueueCounts] = {}
        for row in self.rows:
            k = key(row)
            groups[k] = (groups[k] + row) if k in groups else row.counts()
        return groups

    def oldest_due_age(self, counts: QueueCounts | None = None) -> timedelta:
        """How long the oldest due job of ``counts`` (default: all rows) has waited past its
        due time at ``now``; zero when nothing is due."""
        oldest = (counts if counts is not None else self.total()).oldest_due_at
        if oldest is None:
            return timedelta(0)
        return max(timedelta(0), self.now - oldest)


def rows_from_counts(
    counted: Iterable[tuple[tuple[str | None, str, JobPriority], QueueCounts]],
) -> tuple[QueueStatsRow, ...]:
    """Rows in a stable order (execution target, target, band) from keyed counts, leaving out
    groups with nothing counted (store helper)."""
    rows = [
        QueueStatsRow(
            execution_target=execution_target,
            target=target,
            priority_band=band,
            pending=c.pending,
            due=c.due,
            oldest_due_at=c.oldest_due_at,
            running=c.running,
            succeeded=c.succeeded,
            failed=c.failed,
        )
        for (execution_target, target, band), c in counted
        if c.pending or c.running or c.succeeded or c.failed
    ]
    rows.sort(key=lambda r: (r.execution_target or "", r.target, int(r.priority_band)))
    return tuple(rows)


def stats_of_jobs(
    jobs: Iterable[JobEntity],
    now: datetime,
    finished_since: datetime | None = None,
    *,
    exact: bool = True,
    scanned: int | None = None,
) -> QueueStats:
    """``QueueStats`` computed from job entities in memory (the in-memory store, and the
    engine's fallback over a bounded scan): what ``QueueStatsStore.queue_stats`` returns for
    exactly these jobs at ``now``."""
    counted: dict[tuple[str | None, str, JobPriority], QueueCounts] = {}
    for job in jobs:
        if job.status is JobStatus.PENDING:
            is_due = job.scheduled_at <= now
            counts = QueueCounts(
                pending=1, due=int(is_due), oldest_due_at=job.scheduled_at if is_due else None
            )
        elif job.status is JobStatus.RUNNING:
            counts = QueueCounts(running=1)
        elif (
            finished_since is not None
            and job.status in (JobStatus.SUCCEEDED, JobStatus.FAILED)
            and job.finished_at is not None
            and job.finished_at >= finished_since
        ):
            ok = job.status is JobStatus.SUCCEEDED
            counts = QueueCounts(succeeded=int(ok), failed=int(not ok))
        else:
            continue
        key = (job.execution_target, job.target, priority_band(job.priority))
        counted[key] = counted[key] + counts if key in counted else counts
    return QueueStats(
        now=now,
        rows=rows_from_counts(counted.items()),
        finished_since=finished_since,
        exact=exact,
        scanned=scanned,
    )


__all__ = [
    "BAND_BOUNDS",
    "PRIORITY_BANDS",
    "QueueCounts",
    "QueueStats",
    "QueueStatsRow",
    "priority_band",
    "rows_from_counts",
    "stats_of_jobs",
]
