"""The engine's queue figures for a store without ``QueueStatsStore``: a bounded scan through
``JobQueryStore`` that says whether it covered every row (``QueueStats.exact``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from ratchet_api.model import JobPriority, JobStatus
from ratchet_api.store.protocols import QueueStatsStore
from ratchet_core.observability.queues import read_queue_stats
from ratchet_tck.fixture import BaseStoreFixture, now_ms
from ratchet_tck.memory import InMemoryJobStore

C = TypeVar("C")


class WithoutQueueStats(InMemoryJobStore):
    """The reference store, not advertising ``QueueStatsStore`` (a store written before it)."""

    def capability(self, kind: Callable[..., C]) -> C | None:
        if kind is QueueStatsStore:
            return None
        return super().capability(kind)


def _jobs(*stores: Any) -> None:
    """The same six jobs into each store."""
    factory = BaseStoreFixture()
    now = now_ms()
    jobs = [
        *(factory.new_pending_job(priority=p, execution_target="gpu") for p in (0, 0, 60)),
        factory.new_pending_job(scheduled_at=now + timedelta(hours=1)),
        factory.new_pending_job(status=JobStatus.RUNNING, owner="n1"),
        factory.new_pending_job(status=JobStatus.SUCCEEDED, finished_at=now, started_at=now),
    ]
    for store in stores:
        for job in jobs:
            store.insert_job(job)


def test_the_scan_gives_what_the_capability_gives() -> None:
    native, scanned = InMemoryJobStore(), WithoutQueueStats()
    _jobs(native, scanned)
    since = now_ms() - timedelta(minutes=5)
    exact = read_queue_stats(native, since)
    fallback = read_queue_stats(scanned, since)
    assert exact.exact and exact.scanned is None
    assert fallback.exact and fallback.scanned == 6
    key = lambda r: (r.execution_target, r.priority_band)  # noqa: E731
    assert fallback.grouped(key) == exact.grouped(key)
    gpu = fallback.grouped(key)[("gpu", JobPriority.NORMAL)]
    assert (gpu.pending, gpu.due) == (2, 2)
    assert fallback.total().succeeded == 1 and fallback.total().running == 1


def test_a_truncated_scan_says_so() -> None:
    store = WithoutQueueStats()
    _jobs(store)
    stats = read_queue_stats(store, scan=2)
    assert not stats.exact
    assert stats.scanned == 2
    assert stats.total().pending + stats.total().running == 2
