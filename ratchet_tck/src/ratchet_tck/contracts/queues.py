"""The queue statistics contract (``QueueStatsStore``): what autoscalers and metrics read."""

from __future__ import annotations

import uuid
from datetime import timedelta

from ratchet_api.model import JobPriority, JobStatus
from ratchet_api.store.protocols import QueueStatsStore
from ratchet_api.store.queues import QueueCounts, QueueStats, priority_band
from ratchet_api.store.versions import SPI_1_1
from ratchet_tck.contracts.base import (
    StoreContract,
    assert_aware_utc,
    assert_same_instant,
    naive,
    raises_store_data_error,
)
from ratchet_tck.contracts.history import finished
from ratchet_tck.fixture import StoreFixture, now_ms


def _target() -> str:
    """A job target of this test alone (rows of other targets are ignored)."""
    return f"tck.queues.job_{uuid.uuid4().hex[:12]}"


def _mine(stats: QueueStats, target: str) -> QueueStats:
    return QueueStats(
        now=stats.now,
        rows=tuple(r for r in stats.rows if r.target == target),
        finished_since=stats.finished_since,
    )


class QueueStatsStoreContract(StoreContract):
    """Pending, due, oldest due, running and finished counts per execution target, job target
    and priority band, read at the store's clock."""

    capability = QueueStatsStore
    spi_since = SPI_1_1  # a capability new in store SPI 1.1 (third wave)
    summary = (
        "pending/due/oldest due per execution target, target and priority band; running; "
        "finished since; store clock"
    )

    def test_priority_bands_split_half_way(self, tck_fixture: StoreFixture) -> None:
        del tck_fixture  # the banding is the API's: stores compute the same in their query
        assert [priority_band(p) for p in (-100, -26, -25, 24, 25, 74, 75, 100)] == [
            JobPriority.LOW,
            JobPriority.LOW,
            JobPriority.NORMAL,
            JobPriority.NORMAL,
            JobPriority.HIGH,
            JobPriority.HIGH,
            JobPriority.CRITICAL,
            JobPriority.CRITICAL,
        ]

    def test_pending_due_and_oldest_per_execution_target_and_band(
        self, tck_fixture: StoreFixture
    ) -> None:
        stats_store = self.cap(tck_fixture, QueueStatsStore)
        target = _target()
        base = now_ms()
        oldest = base - timedelta(minutes=10)
        self.insert(tck_fixture, target=target, scheduled_at=oldest)
        self.insert(tck_fixture, target=target, scheduled_at=base - timedelta(minutes=1))
        self.insert(tck_fixture, target=target, scheduled_at=base + timedelta(hours=1))
        self.insert(tck_fixture, target=target, priority=30, scheduled_at=base - timedelta(hours=1))
        self.insert(
            tck_fixture, target=target, priority=-26, scheduled_at=base - timedelta(hours=2)
        )
        gpu_due = base - timedelta(minutes=5)
        self.insert(tck_fixture, target=target, execution_target="gpu", scheduled_at=gpu_due)
        self.insert(
            tck_fixture,
            target=target,
            execution_target="gpu",
            priority=100,
            scheduled_at=base + timedelta(hours=1),
        )
        self.insert(tck_fixture, target=target, status=JobStatus.PAUSED)
        self.insert(tck_fixture, target=target, status=JobStatus.WAITING)

        stats = _mine(stats_store.queue_stats(), target)
        assert_aware_utc(stats.now, "QueueStats.now")
        assert abs(stats.now - now_ms()) < timedelta(minutes=1), "now is the store's clock"
        by_key = stats.grouped(lambda r: (r.execution_target, r.priority_band))
        assert set(by_key) == {
            (None, JobPriority.NORMAL),
            (None, JobPriority.HIGH),
            (None, JobPriority.LOW),
            ("gpu", JobPriority.NORMAL),
            ("gpu", JobPriority.CRITICAL),
        }, "one row per execution target and band with a counted job (paused, waiting: none)"
        normal = by_key[(None, JobPriority.NORMAL)]
        assert (normal.pending, normal.due, normal.running) == (3, 2, 0)
        assert_same_instant(normal.oldest_due_at, oldest, "oldest due of the NORMAL band")
        assert by_key[(None, JobPriority.HIGH)].due == 1
        assert by_key[(None, JobPriority.LOW)].due == 1
        gpu = by_key[("gpu", JobPriority.NORMAL)]
        assert (gpu.pending, gpu.due) == (1, 1)
        assert_same_instant(gpu.oldest_due_at, gpu_due, "oldest due of gpu")
        later = by_key[("gpu", JobPriority.CRITICAL)]
        assert (later.pending, later.due, later.oldest_due_at) == (1, 0, None)
        total = stats.total()
        assert (total.pending, total.due) == (7, 5)
        assert_same_instant(total.oldest_due_at, base - timedelta(hours=2), "oldest due")
        assert stats.oldest_due_age() >= timedelta(hours=2) - timedelta(seconds=1)

    def test_running_and_finished_since(self, tck_fixture: StoreFixture) -> None:
        stats_store = self.cap(tck_fixture, QueueStatsStore)
        store = tck_fixture.store()
        target = _target()
        finished(self, tck_fixture, target=target)  # before the window
        since = store.server_now()
        finished(self, tck_fixture, target=target)
        finished(self, tck_fixture, target=target)
        finished(self, tck_fixture, ok=False, target=target)
        running = self.insert(tck_fixture, target=target, execution_target="io")
        claimed = store.claim_next_batch("tck-node", 1, execution_targets=["io"])
        assert [j.id for j in claimed] == [running.id]
        self.insert(tck_fixture, target=target)

        stats = _mine(stats_store.queue_stats(since), target)
        assert_same_instant(stats.finished_since, since, "finished_since")
        by_label = stats.grouped(lambda r: r.execution_target)
        assert by_label["io"] == QueueCounts(running=1)
        default = by_label[None]
        assert (default.pending, default.due, default.running) == (1, 1, 0)
        assert (default.succeeded, default.failed) == (2, 1)

        without = _mine(stats_store.queue_stats(), target).total()
        assert (without.succeeded, without.failed) == (0, 0), "no window, no finished counts"
        assert (without.pending, without.running) == (1, 1)

    def test_empty_store_reads_the_clock(self, tck_fixture: StoreFixture) -> None:
        stats_store = self.cap(tck_fixture, QueueStatsStore)
        stats = _mine(stats_store.queue_stats(now_ms()), _target())
        assert stats.rows == ()
        assert stats.total() == QueueCounts()
        assert stats.oldest_due_age() == timedelta(0)
        assert_aware_utc(stats.now, "QueueStats.now")

    def test_naive_window_is_refused(self, tck_fixture: StoreFixture) -> None:
        stats_store = self.cap(tck_fixture, QueueStatsStore)
        with raises_store_data_error("finished_since"):
            stats_store.queue_stats(naive(now_ms()))


__all__ = ["QueueStatsStoreContract"]
