# (capabilities are probed by passing their Protocol class: store.capability(LockStore))
"""Capability contracts over finished work: archive, query, analytics, audit."""

from __future__ import annotations

from datetime import timedelta

import attrs
import pytest

from ratchet_api.errors import UnsupportedCapabilityError
from ratchet_api.ids import uuid7
from ratchet_api.model import JobStatus, JobType
from ratchet_api.store.entities import (
    ExecutionRecord,
    JobEntity,
    JobLogLine,
    JobQuery,
    LogLevel,
    SortOrder,
)
from ratchet_api.store.protocols import (
    ArchiveStore,
    JobAnalyticsStore,
    JobAuditStore,
    JobExtensionStore,
    JobQueryStore,
)
from ratchet_api.store.versions import SPI_1_1
from ratchet_tck.contracts.base import (
    StoreContract,
    assert_same_instant,
    naive,
    raises_store_data_error,
)
from ratchet_tck.fixture import StoreFixture, now_ms
from ratchet_tck.versions import spi


def finished(
    contract: StoreContract, fixture: StoreFixture, ok: bool = True, **kw: object
) -> JobEntity:
    """Insert, claim and finish one job; returns the stored finished job."""
    store = fixture.store()
    job = contract.insert(fixture, **kw)
    claimed = store.claim_next_batch("tck-node", 1)
    assert [j.id for j in claimed] == [job.id]
    if ok:
        assert store.mark_succeeded(job.id, claimed[0].claim_seq, '"done"')
    else:
        assert store.mark_failed_terminal(job.id, claimed[0].claim_seq, "boom")
    return contract.reload(store, job)


class ArchiveStoreContract(StoreContract):
    """Terminal jobs move to the archive with their tags; nothing else moves."""

    capability = ArchiveStore
    summary = "archive one/by age/by status, only terminal jobs, archived reads, archive purge"

    def test_archive_moves_a_terminal_job(self, tck_fixture: StoreFixture) -> None:
        archive = self.cap(tck_fixture, ArchiveStore)
        store = tck_fixture.store()
        job = finished(self, tck_fixture, tags=("tck-x", "tck-y"))
        assert archive.archive_job(job.id) is True
        assert store.find_by_id(job.id) is None
        moved = archive.find_archived_job(job.id)
        assert moved is not None
        assert (moved.status, moved.result, moved.target) == (job.status, job.result, job.target)
        assert sorted(moved.tags) == ["tck-x", "tck-y"]
        assert_same_instant(moved.finished_at, job.finished_at, "finished_at")
        assert archive.archive_job(job.id) is False

    def test_non_terminal_or_missing_jobs_are_not_archived(self, tck_fixture: StoreFixture) -> None:
        archive = self.cap(tck_fixture, ArchiveStore)
        store = tck_fixture.store()
        running = self.insert(tck_fixture)
        self.claim_one(store)
        for job in (
            running,
            self.insert(tck_fixture),
            self.insert(tck_fixture, status=JobStatus.PAUSED),
        ):
            assert archive.archive_job(job.id) is False
            assert store.find_by_id(job.id) is not None
            assert archive.find_archived_job(job.id) is None
        assert archive.archive_job(uuid7()) is False

    def test_archive_finished_before_cutoff_with_limit(self, tck_fixture: StoreFixture) -> None:
        archive = self.cap(tck_fixture, ArchiveStore)
        store = tck_fixture.store()
        old = [finished(self, tck_fixture, ok=i % 2 == 0) for i in range(3)]
        cancelled = self.insert(tck_fixture)
        assert store.cancel_job(cancelled.id)
        self.insert(tck_fixture, status=JobStatus.PAUSED)
        cutoff = store.server_now() + timedelta(milliseconds=1)
        assert archive.archive_finished_before(cutoff - timedelta(hours=1), 10) == 0
        assert archive.archive_finished_before(cutoff, 2) == 2
        assert archive.archive_finished_before(cutoff, 10) == 2
        for job in (*old, cancelled):
            assert store.find_by_id(job.id) is None
            assert archive.find_archived_job(job.id) is not None
        assert archive.archive_finished_before(cutoff, 10) == 0

    def test_find_archived_jobs_newest_finished_first(self, tck_fixture: StoreFixture) -> None:
        archive = self.cap(tck_fixture, ArchiveStore)
        jobs = [finished(self, tck_fixture) for _ in range(3)]
        for job in jobs:
            assert archive.archive_job(job.id)
        newest_first = [
            j.id for j in sorted(jobs, key=lambda j: (j.finished_at, j.id.int), reverse=True)
        ]
        assert [j.id for j in archive.find_archived_jobs(10)] == newest_first
        assert [j.id for j in archive.find_archived_jobs(1, offset=1)] == newest_first[1:2]

    def test_archive_refuses_naive_cutoff(self, tck_fixture: StoreFixture) -> None:
        archive = self.cap(tck_fixture, ArchiveStore)
        with raises_store_data_error("cutoff"):
            archive.archive_finished_before(naive(now_ms()), 10)
        with raises_store_data_error("cutoff"):
            archive.delete_archived_before(naive(now_ms()), 10)

    @spi(since=SPI_1_1)
    def test_archive_finished_before_only_the_given_statuses(
        self, tck_fixture: StoreFixture
    ) -> None:
        archive = self.cap(tck_fixture, ArchiveStore)
        store = tck_fixture.store()
        ok = finished(self, tck_fixture)
        failed = finished(self, tck_fixture, ok=False)
        cancelled = self.insert(tck_fixture)
        assert store.cancel_job(cancelled.id)
        cutoff = store.server_now() + timedelta(milliseconds=1)
        assert archive.archive_finished_before(cutoff, 10, statuses=[]) == 0
        assert archive.archive_finished_before(cutoff, 10, statuses=[JobStatus.FAILED]) == 1
        assert archive.find_archived_job(failed.id) is not None
        assert store.find_by_id(ok.id) is not None
        assert store.find_by_id(cancelled.id) is not None
        moved = archive.archive_finished_before(
            cutoff, 10, statuses=[JobStatus.SUCCEEDED, JobStatus.CANCELLED]
        )
        assert moved == 2
        assert archive.find_archived_job(ok.id) is not None
        assert archive.find_archived_job(cancelled.id) is not None
        with raises_store_data_error("statuses"):
            archive.archive_finished_before(cutoff, 10, statuses=[JobStatus.PENDING])

    @spi(since=SPI_1_1)
    def test_delete_archived_before_cutoff_with_limit(self, tck_fixture: StoreFixture) -> None:
        archive = self.cap(tck_fixture, ArchiveStore)
        store = tck_fixture.store()
        old = [finished(self, tck_fixture, ok=i % 2 == 0) for i in range(3)]
        audit = store.capability(JobAuditStore)
        if audit is not None:
            audit.save_execution(
                ExecutionRecord(
                    job_id=old[0].id,
                    attempt=1,
                    node_id="tck-node",
                    status=JobStatus.SUCCEEDED,
                    started_at=now_ms(),
                )
            )
        for job in old:
            assert archive.archive_job(job.id)
        cutoff = store.server_now() + timedelta(milliseconds=1)
        hot = finished(self, tck_fixture)
        assert archive.delete_archived_before(cutoff - timedelta(hours=1), 10) == 0
        assert archive.delete_archived_before(cutoff, 2) == 2
        assert archive.delete_archived_before(cutoff, 10) == 1
        for job in old:
            assert archive.find_archived_job(job.id) is None
            assert store.find_by_id(job.id) is None
        assert archive.delete_archived_before(cutoff + timedelta(hours=1), 10) == 0
        assert self.reload(store, hot).status is JobStatus.SUCCEEDED
        if audit is not None:
            assert audit.find_executions_by_job_id(old[0].id) == []


class JobQueryStoreContract(StoreContract):
    """Filters ANDed, ordered by creation, paged; counts ignore paging."""

    capability = JobQueryStore
    summary = "filters, order, paging, counts, tag lookup, property filters"

    def test_filters_are_combined(self, tck_fixture: StoreFixture) -> None:
        query = self.cap(tck_fixture, JobQueryStore)
        store = tck_fixture.store()
        parent = store.insert_job(tck_fixture.new_batch_parent_job())
        batch_id = uuid7()
        a = self.insert(
            tck_fixture,
            target="m:a",
            tags=("tck-q",),
            parent_id=parent.id,
            job_type=JobType.BATCH_CHILD,
            batch_id=batch_id,
        )
        b = self.insert(tck_fixture, target="m:b", tags=("tck-q",), status=JobStatus.PAUSED)
        self.insert(tck_fixture, target="m:a")
        assert [j.id for j in query.search_jobs(JobQuery(tag="tck-q"))] == [b.id, a.id]
        assert [j.id for j in query.search_jobs(JobQuery(tag="tck-q", target="m:a"))] == [a.id]
        paused = JobQuery(statuses=frozenset({JobStatus.PAUSED}))
        assert [j.id for j in query.search_jobs(paused)] == [b.id]
        assert [j.id for j in query.search_jobs(JobQuery(parent_id=parent.id))] == [a.id]
        assert [j.id for j in query.search_jobs(JobQuery(batch_id=batch_id))] == [a.id]
        by_type = JobQuery(job_type=JobType.BATCH_CHILD)
        assert [j.id for j in query.search_jobs(by_type)] == [a.id]
        assert query.search_jobs(JobQuery(tag="tck-none")) == []

    def test_order_and_paging(self, tck_fixture: StoreFixture) -> None:
        query = self.cap(tck_fixture, JobQueryStore)
        base = now_ms() - timedelta(minutes=1)
        jobs = [
            self.insert(tck_fixture, tags=("tck-page",), created_at=base + timedelta(seconds=i))
            for i in range(5)
        ]
        ids = [j.id for j in jobs]
        oldest = JobQuery(tag="tck-page", order=SortOrder.OLDEST_FIRST)
        assert [j.id for j in query.search_jobs(oldest)] == ids
        newest = JobQuery(tag="tck-page", order=SortOrder.NEWEST_FIRST)
        assert [j.id for j in query.search_jobs(newest)] == ids[::-1]
        page = attrs.evolve(oldest, limit=2, offset=2)
        assert [j.id for j in query.search_jobs(page)] == ids[2:4]
        assert query.count_jobs(page) == 5
        window = attrs.evolve(
            oldest,
            created_after=base + timedelta(milliseconds=500),
            created_before=base + timedelta(seconds=3, milliseconds=500),
        )
        assert [j.id for j in query.search_jobs(window)] == ids[1:4]

    def test_count_jobs(self, tck_fixture: StoreFixture) -> None:
        query = self.cap(tck_fixture, JobQueryStore)
        for _ in range(3):
            self.insert(tck_fixture, tags=("tck-count",))
        self.insert(tck_fixture, tags=("tck-count",), status=JobStatus.PAUSED)
        assert query.count_jobs(JobQuery(tag="tck-count")) == 4
        pending = JobQuery(tag="tck-count", statuses=frozenset({JobStatus.PENDING}), limit=1)
        assert query.count_jobs(pending) == 3

    def test_find_job_ids_by_tag(self, tck_fixture: StoreFixture) -> None:
        query = self.cap(tck_fixture, JobQueryStore)
        tagged = {self.insert(tck_fixture, tags=("tck-find",)).id for _ in range(3)}
        self.insert(tck_fixture)
        assert set(query.find_job_ids_by_tag("tck-find", 10)) == tagged
        assert len(query.find_job_ids_by_tag("tck-find", 2)) == 2
        assert query.find_job_ids_by_tag("tck-missing", 10) == []

    def test_property_filters(self, tck_fixture: StoreFixture) -> None:
        query = self.cap(tck_fixture, JobQueryStore)
        a = self.insert(tck_fixture)
        b = self.insert(tck_fixture)
        by_tenant = JobQuery(properties={"tenant": "acme"})
        ext = tck_fixture.store().capability(JobExtensionStore)
        if ext is None:
            with pytest.raises(UnsupportedCapabilityError):
                query.search_jobs(by_tenant)
            return
        assert ext.put_property(a.id, "tenant", "acme")
        assert ext.put_property(a.id, "region", "eu")
        assert ext.put_property(b.id, "tenant", "other")
        assert [j.id for j in query.search_jobs(by_tenant)] == [a.id]
        both = JobQuery(properties={"tenant": "acme", "region": "us"})
        assert query.search_jobs(both) == []
        assert query.count_jobs(by_tenant) == 1


def _close(actual: timedelta | None, expected: timedelta) -> bool:
    """Durations agree at millisecond precision (some databases compute them in floats)."""
    assert actual is not None, f"expected {expected}, store returned None"
    assert abs(actual - expected) < timedelta(milliseconds=1), f"expected {expected}, got {actual}"
    return True


class JobAnalyticsStoreContract(StoreContract):
    """Counts per status, finished counts over a window, nearest-rank percentiles."""

    capability = JobAnalyticsStore
    summary = "counts by status, finished since, execution and wait percentiles"

    def test_count_jobs_by_status_lists_every_status(self, tck_fixture: StoreFixture) -> None:
        analytics = self.cap(tck_fixture, JobAnalyticsStore)
        self.insert(tck_fixture)
        self.insert(tck_fixture)
        self.insert(tck_fixture, status=JobStatus.PAUSED)
        counts = analytics.count_jobs_by_status()
        assert set(counts) == set(JobStatus)
        assert counts[JobStatus.PENDING] == 2
        assert counts[JobStatus.PAUSED] == 1
        assert counts[JobStatus.SUCCEEDED] == 0

    def test_count_finished_since(self, tck_fixture: StoreFixture) -> None:
        analytics = self.cap(tck_fixture, JobAnalyticsStore)
        store = tck_fixture.store()
        finished(self, tck_fixture)
        since = store.server_now()
        finished(self, tck_fixture)
        finished(self, tck_fixture)
        finished(self, tck_fixture, ok=False)
        self.insert(tck_fixture)
        counts = analytics.count_finished_since(since)
        assert counts.get(JobStatus.SUCCEEDED, 0) == 2
        assert counts.get(JobStatus.FAILED, 0) == 1
        assert counts.get(JobStatus.PENDING, 0) == 0
        early = analytics.count_finished_since(since - timedelta(hours=1))
        assert early.get(JobStatus.SUCCEEDED, 0) == 3

    def test_execution_time_percentiles_nearest_rank(self, tck_fixture: StoreFixture) -> None:
        analytics = self.cap(tck_fixture, JobAnalyticsStore)
        base = now_ms() - timedelta(minutes=10)
        assert analytics.execution_time_percentile(50, base) is None
        for seconds in (7, 1, 10, 3, 5, 2, 9, 4, 8, 6):
            self.insert(
                tck_fixture,
                status=JobStatus.SUCCEEDED,
                started_at=base,
                finished_at=base + timedelta(seconds=seconds),
            )
        self.insert(
            tck_fixture,
            status=JobStatus.FAILED,
            started_at=base,
            finished_at=base + timedelta(seconds=100),
        )
        self.insert(
            tck_fixture,
            status=JobStatus.SUCCEEDED,
            started_at=base - timedelta(hours=2),
            finished_at=base - timedelta(hours=1),
        )
        assert _close(analytics.execution_time_percentile(50, base), timedelta(seconds=5))
        assert _close(analytics.execution_time_percentile(90, base), timedelta(seconds=9))
        assert _close(analytics.execution_time_percentile(100, base), timedelta(seconds=10))
        assert _close(analytics.execution_time_percentile(95, base), timedelta(seconds=10))

    def test_queue_wait_percentiles(self, tck_fixture: StoreFixture) -> None:
        analytics = self.cap(tck_fixture, JobAnalyticsStore)
        base = now_ms() - timedelta(minutes=10)
        assert analytics.queue_wait_percentile(50, base) is None
        for ms in (100, 400, 200, 300):
            self.insert(
                tck_fixture,
                status=JobStatus.RUNNING,
                scheduled_at=base,
                started_at=base + timedelta(milliseconds=ms),
                owner="tck-node",
            )
        assert _close(analytics.queue_wait_percentile(50, base), timedelta(milliseconds=200))
        assert _close(analytics.queue_wait_percentile(100, base), timedelta(milliseconds=400))
        later = base + timedelta(milliseconds=250)
        assert _close(analytics.queue_wait_percentile(50, later), timedelta(milliseconds=300))


class JobAuditStoreContract(StoreContract):
    """Executions by attempt; log lines in append order, limited, per job."""

    capability = JobAuditStore
    summary = (
        "executions by attempt (one or a batch, with traceback and superseded flag), per-job "
        "logs in order with limit"
    )

    def test_executions_ordered_by_attempt(self, tck_fixture: StoreFixture) -> None:
        audit = self.cap(tck_fixture, JobAuditStore)
        job = self.insert(tck_fixture)
        start = now_ms()
        second = ExecutionRecord(
            job_id=job.id,
            attempt=2,
            node_id="n2",
            status=JobStatus.SUCCEEDED,
            started_at=start,
            finished_at=start + timedelta(seconds=2),
            duration_ms=2000,
        )
        first = ExecutionRecord(
            job_id=job.id,
            attempt=1,
            node_id="n1",
            status=JobStatus.FAILED,
            started_at=start - timedelta(seconds=5),
            error="IOError",
        )
        audit.save_execution(second)
        audit.save_execution(first)
        audit.save_execution(
            ExecutionRecord(
                job_id=uuid7(), attempt=1, node_id="n1", status=JobStatus.FAILED, started_at=start
            )
        )
        found = audit.find_executions_by_job_id(job.id)
        assert [e.attempt for e in found] == [1, 2]
        assert (found[0].node_id, found[0].status, found[0].error) == (
            "n1",
            JobStatus.FAILED,
            "IOError",
        )
        assert (found[1].duration_ms, found[1].status) == (2000, JobStatus.SUCCEEDED)
        assert_same_instant(found[1].finished_at, second.finished_at, "finished_at")
        assert audit.find_executions_by_job_id(uuid7()) == []

    def test_save_executions_writes_every_record_of_the_batch(
        self, tck_fixture: StoreFixture
    ) -> None:
        audit = self.cap(tck_fixture, JobAuditStore)
        jobs = [self.insert(tck_fixture) for _ in range(3)]
        start = now_ms()
        records = [
            ExecutionRecord(
                job_id=job.id,
                attempt=attempt,
                node_id=f"n{attempt}",
                status=JobStatus.FAILED if attempt == 1 else JobStatus.SUCCEEDED,
                started_at=start + timedelta(seconds=attempt),
                finished_at=start + timedelta(seconds=attempt, milliseconds=250),
                duration_ms=250,
                error="IOError: disk" if attempt == 1 else None,
            )
            for attempt in (2, 1)
            for job in jobs
        ]
        audit.save_executions(records)
        for job in jobs:
            found = audit.find_executions_by_job_id(job.id)
            assert [(e.attempt, e.node_id, e.status) for e in found] == [
                (1, "n1", JobStatus.FAILED),
                (2, "n2", JobStatus.SUCCEEDED),
            ]
            assert [e.id for e in found] == [
                r.id for r in sorted(records, key=lambda r: r.attempt) if r.job_id == job.id
            ]
            assert (found[0].error, found[0].duration_ms) == ("IOError: disk", 250)
            assert found[1].error is None
            assert_same_instant(found[1].finished_at, records[0].finished_at, "finished_at")

    @spi(since=SPI_1_1)
    def test_traceback_and_superseded_are_kept(self, tck_fixture: StoreFixture) -> None:
        audit = self.cap(tck_fixture, JobAuditStore)
        job = self.insert(tck_fixture)
        start = now_ms()
        trace = 'Traceback (most recent call last):\n  File "jobs.py", line 3\nOSError: disk'
        failed = ExecutionRecord(
            job_id=job.id,
            attempt=1,
            node_id="n1",
            status=JobStatus.FAILED,
            started_at=start,
            error="OSError: disk",
            traceback=trace,
        )
        replaced = ExecutionRecord(
            job_id=job.id,
            attempt=2,
            node_id="n1",
            status=JobStatus.SUCCEEDED,
            started_at=start + timedelta(seconds=1),
            superseded=True,
        )
        kept = ExecutionRecord(
            job_id=job.id,
            attempt=3,
            node_id="n2",
            status=JobStatus.SUCCEEDED,
            started_at=start + timedelta(seconds=2),
        )
        audit.save_execution(failed)
        audit.save_executions([replaced, kept])
        found = audit.find_executions_by_job_id(job.id)
        assert [(e.attempt, e.traceback, e.superseded) for e in found] == [
            (1, trace, False),
            (2, None, True),
            (3, None, False),
        ]

    def test_save_executions_of_nothing_writes_nothing(self, tck_fixture: StoreFixture) -> None:
        audit = self.cap(tck_fixture, JobAuditStore)
        job = self.insert(tck_fixture)
        audit.save_executions([])
        assert audit.find_executions_by_job_id(job.id) == []
        one = ExecutionRecord(
            job_id=job.id, attempt=1, node_id="n1", status=JobStatus.SUCCEEDED, started_at=now_ms()
        )
        audit.save_executions([one])
        assert [e.id for e in audit.find_executions_by_job_id(job.id)] == [one.id]

    def test_logs_in_append_order_with_limit(self, tck_fixture: StoreFixture) -> None:
        audit = self.cap(tck_fixture, JobAuditStore)
        job = self.insert(tck_fixture)
        other = self.insert(tck_fixture)
        at = now_ms()
        lines = [
            JobLogLine(
                job_id=job.id, logged_at=at, level=LogLevel.INFO, message=f"line {i}", attempt=1
            )
            for i in range(5)
        ]
        audit.append_logs(lines[:3])
        audit.append_logs([JobLogLine(job_id=other.id, message="elsewhere")])
        audit.append_logs(lines[3:])
        found = audit.find_logs_by_job_id(job.id)
        assert [line.message for line in found] == [f"line {i}" for i in range(5)]
        assert found[0].level is LogLevel.INFO and found[0].attempt == 1
        assert [line.message for line in audit.find_logs_by_job_id(job.id, limit=2)] == [
            "line 0",
            "line 1",
        ]
        assert [line.message for line in audit.find_logs_by_job_id(other.id)] == ["elsewhere"]
        audit.append_logs([])
