"""Queue figures for metrics, autoscalers and the dashboard: the store's ``QueueStatsStore``
when it has one, else the engine's fallback, a bounded scan of the newest jobs through
``JobQueryStore`` (``QueueStats.exact`` False, ``scanned`` the rows read)."""

from __future__ import annotations

from datetime import datetime

from ratchet_api.model import JobStatus
from ratchet_api.store.entities import JobQuery, SortOrder
from ratchet_api.store.protocols import JobQueryStore, JobStore, QueueStatsStore
from ratchet_api.store.queues import QueueStats, stats_of_jobs

FALLBACK_SCAN = 2_000
"""Rows of each kind (active, finished) the fallback reads when the store has no
``QueueStatsStore``."""


def read_queue_stats(
    store: JobStore, finished_since: datetime | None = None, *, scan: int = FALLBACK_SCAN
) -> QueueStats:
    """The queue figures of ``store`` (see ``QueueStatsStore.queue_stats``). A store without
    the capability is scanned: the oldest ``scan`` PENDING/RUNNING jobs and the newest ``scan``
    finished since ``finished_since``; ``exact`` says whether that covered every row."""
    native = store.capability(QueueStatsStore)
    if native is not None:
        return native.queue_stats(finished_since)
    now = store.server_now()
    queries = store.capability(JobQueryStore)
    if queries is None:
        return QueueStats(now=now, finished_since=finished_since, exact=False, scanned=0)
    active = queries.search_jobs(
        JobQuery(
            statuses=frozenset({JobStatus.PENDING, JobStatus.RUNNING}),
            limit=scan,
            order=SortOrder.OLDEST_FIRST,
        )
    )
    finished = (
        queries.search_jobs(
            JobQuery(
                statuses=frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED}),
                created_after=finished_since,
                limit=scan,
            )
        )
        if finished_since is not None
        else []
    )
    truncated = len(active) >= scan or len(finished) >= scan
    return stats_of_jobs(
        [*active, *finished],
        now,
        finished_since,
        exact=not truncated,
        scanned=len(active) + len(finished),
    )


__all__ = ["FALLBACK_SCAN", "read_queue_stats"]
