"""Retention on every store: finished jobs move to the archive after their status's retention,
archived jobs and dead letters are deleted after ``retention.archive``; a running worker does it
on its own (under the lease) while other jobs flow, touching no job in flight."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any, cast

import attrs
import pytest

from ratchet_api.ids import uuid7
from ratchet_api.model import JobStatus
from ratchet_api.store.entities import JobEntity, JobQuery
from ratchet_api.store.protocols import ArchiveStore, JobQueryStore, JobStore
from ratchet_core.features.retention import (
    Retention,
    RetentionPolicy,
    RetentionTask,
    parse_retention,
)
from tests.engine.conftest import build_container, migrate
from tests.engine.targets import greet


def backdated(
    store: JobStore, status: JobStatus, age: timedelta, tag: str, **changes: Any
) -> JobEntity:
    """A job in ``status`` that finished (terminal) or was created (otherwise) ``age`` ago."""
    now = store.server_now().replace(microsecond=0)
    at = now - age
    terminal = status.is_terminal
    job = JobEntity(
        id=uuid7(),
        status=status,
        target="tests.engine.targets:greet",
        payload='{"args": ["old"], "kwargs": {}}',
        scheduled_at=at - timedelta(seconds=2),
        created_at=at - timedelta(seconds=3),
        updated_at=at,
        started_at=at - timedelta(seconds=1) if terminal else None,
        finished_at=at if terminal else None,
        attempt=1 if terminal else 0,
        result='"ok"' if status is JobStatus.SUCCEEDED else None,
        last_error="boom" if status is JobStatus.FAILED else None,
        tags=(tag,),
    )
    return attrs.evolve(job, **changes) if changes else job


def where(store: JobStore, job: JobEntity) -> str:
    archive = store.capability(ArchiveStore)
    assert archive is not None
    in_hot = store.find_by_id(job.id) is not None
    in_archive = archive.find_archived_job(job.id) is not None
    assert not (in_hot and in_archive), f"job {job.id} is in both places"
    return "hot" if in_hot else "archive" if in_archive else "gone"


def hot_count(store: JobStore, tag: str) -> int:
    queries = store.capability(JobQueryStore)
    assert queries is not None
    return queries.count_jobs(JobQuery(tag=tag))


@pytest.fixture
def container(store_url: str) -> Iterator[Any]:
    container = build_container(store_url)
    store: JobStore = container.job_store()
    migrate(store)
    yield container
    container.shutdown_resources()
    store.close()


def test_retention_values_accept_durations_and_never() -> None:
    assert parse_retention("7d") == timedelta(days=7)
    assert parse_retention("90m") == timedelta(minutes=90)
    assert parse_retention(" Never ") is None
    assert parse_retention("off") is None
    with pytest.raises(ValueError, match="'soon'"):
        parse_retention("soon")


def test_sweep_archives_each_status_after_its_retention_and_deletes_old_ones(
    container: Any,
) -> None:
    store: JobStore = container.job_store()
    tag = f"ret-{uuid.uuid4().hex[:10]}"
    day = timedelta(days=1)
    jobs = {
        "succeeded_8d": backdated(store, JobStatus.SUCCEEDED, 8 * day, tag),
        "succeeded_6d": backdated(store, JobStatus.SUCCEEDED, 6 * day, tag),
        "failed_31d": backdated(store, JobStatus.FAILED, 31 * day, tag),
        "failed_29d": backdated(store, JobStatus.FAILED, 29 * day, tag),
        "cancelled_8d": backdated(store, JobStatus.CANCELLED, 8 * day, tag),
        "succeeded_100d": backdated(store, JobStatus.SUCCEEDED, 100 * day, tag),
        "failed_100d": backdated(store, JobStatus.FAILED, 100 * day, tag),
        "pending_100d": backdated(store, JobStatus.PENDING, 100 * day, tag),
        "paused_100d": backdated(store, JobStatus.PAUSED, 100 * day, tag),
    }
    assert store.bulk_insert(list(jobs.values())) == len(jobs)
    # batches of two: every step needs several transactions
    retention = Retention(store, RetentionPolicy(batch_size=2))
    report = retention.sweep()
    assert report.complete
    expected = {
        "succeeded_8d": "archive",
        "succeeded_6d": "hot",
        "failed_31d": "archive",
        "failed_29d": "hot",
        "cancelled_8d": "archive",
        "succeeded_100d": "gone",
        "failed_100d": "gone",
        "pending_100d": "hot",
        "paused_100d": "hot",
    }
    assert {name: where(store, job) for name, job in jobs.items()} == expected
    assert report.archived[JobStatus.SUCCEEDED] >= 2
    assert report.archived[JobStatus.FAILED] >= 2
    assert report.archive_deleted >= 2
    again = retention.sweep()
    assert again.complete
    assert {name: where(store, job) for name, job in jobs.items()} == expected


def test_never_keeps_jobs_and_a_deadline_leaves_work_for_later(container: Any) -> None:
    store: JobStore = container.job_store()
    tag = f"ret-{uuid.uuid4().hex[:10]}"
    old = [backdated(store, JobStatus.SUCCEEDED, timedelta(days=400), tag) for _ in range(5)]
    dead = backdated(store, JobStatus.FAILED, timedelta(days=400), tag)
    store.bulk_insert([*old, dead])
    keep_all = Retention(
        store, RetentionPolicy(succeeded=None, failed=None, cancelled=None, archive=None)
    )
    assert keep_all.sweep().total == 0
    assert {where(store, j) for j in (*old, dead)} == {"hot"}

    # a deadline already passed: nothing is done and the sweep says it is incomplete
    slow = Retention(store, RetentionPolicy(batch_size=1, archive=None))
    report = slow.sweep(deadline=time.monotonic() - 1)
    assert not report.complete and report.total == 0
    assert slow.sweep().complete
    assert {where(store, j) for j in (*old, dead)} == {"archive"}


def test_dead_letters_are_deleted_after_failed_plus_archive_when_not_archived(
    container: Any,
) -> None:
    store: JobStore = container.job_store()
    tag = f"ret-{uuid.uuid4().hex[:10]}"
    day = timedelta(days=1)
    very_old = backdated(store, JobStatus.FAILED, 50 * day, tag)
    old = backdated(store, JobStatus.FAILED, 35 * day, tag)
    store.bulk_insert([very_old, old])
    policy = RetentionPolicy(succeeded=None, cancelled=None, failed=20 * day, archive=20 * day)
    retention = Retention(cast(JobStore, WithoutArchive(store)), policy)
    assert not retention.archives
    report = retention.sweep()
    assert report.dead_letters_deleted >= 1
    assert where(store, very_old) == "gone"
    assert where(store, old) == "hot"


class WithoutArchive:
    """The same store, not advertising ``ArchiveStore`` (a store without an archive)."""

    def __init__(self, store: JobStore) -> None:
        self._store = store

    def capability(self, kind: Any) -> Any:
        return None if kind is ArchiveStore else self._store.capability(kind)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_worker_archives_then_purges_thousands_of_jobs_while_jobs_flow(
    store_url: str, make_worker: Any
) -> None:
    # 2,000 finished jobs (600 on the pure-Python Mongo test server) keep the suite's time
    # bounded; benchmarks/bench_retention.py measures 10,000 and more.
    half = 300 if store_url.startswith("mongodb") else 1000
    container = build_container(
        store_url,
        **{
            "retention.interval": "100ms",
            "retention.batch_size": "500",
            "retention.archive": "45d",
        },
    )
    store: JobStore = container.job_store()
    migrate(store)
    try:
        tag = f"ret-{uuid.uuid4().hex[:10]}"
        keep_tag, purge_tag, flow_tag = f"{tag}-keep", f"{tag}-purge", f"{tag}-flow"
        day = timedelta(days=1)
        statuses = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)
        # finished jobs: half past their retention (archived and kept), half past
        # retention.archive too (archived, then deleted)
        keep = [
            backdated(store, statuses[i % 3], (31 if i % 3 == 1 else 10) * day, keep_tag)
            for i in range(half)
        ]
        purge = [backdated(store, statuses[i % 3], 60 * day, purge_tag) for i in range(half)]
        for part in range(0, half, 1000):
            store.bulk_insert(keep[part : part + 1000])
            store.bulk_insert(purge[part : part + 1000])
        untouched = [
            backdated(store, JobStatus.PAUSED, 60 * day, tag),
            backdated(store, JobStatus.PENDING, 60 * day, tag, scheduled_at=_future(store)),
        ]
        store.bulk_insert(untouched)
        assert hot_count(store, keep_tag) == half

        scheduler = container.scheduler()
        worker = make_worker(container)
        worker.attach_scheduler(scheduler)
        worker.start()
        flowing = []
        for i in range(60):
            flowing.append(scheduler.job(greet).args(f"n{i}").tags(flow_tag).enqueue())
            time.sleep(0.02)

        _wait(
            lambda: hot_count(store, keep_tag) == 0 and hot_count(store, purge_tag) == 0,
            600,
            "retention to empty the jobs table of the 10,000 old jobs",
        )
        archive = store.capability(ArchiveStore)
        assert archive is not None
        _wait(
            lambda: all(archive.find_archived_job(j.id) is None for j in purge[-50:]),
            600,
            "retention to delete the archived jobs past retention.archive",
        )
        _wait(
            lambda: all(
                (j := store.find_by_id(i)) is not None and j.status is JobStatus.SUCCEEDED
                for i in flowing
            ),
            120,
            "the flowing jobs to succeed",
        )
        worker.stop(timeout=10)

        # every flowing job finished in the hot table, untouched by retention
        for job_id in flowing:
            job = store.find_by_id(job_id)
            assert job is not None and job.status is JobStatus.SUCCEEDED
        assert [(j.status, where(store, j)) for j in untouched] == [
            (j.status, "hot") for j in untouched
        ]
        assert {where(store, j) for j in keep[::50]} == {"archive"}
        assert {where(store, j) for j in purge[::50]} == {"gone"}
        assert archive.find_archived_job(keep[0].id) is not None
    finally:
        container.shutdown_resources()
        store.close()


def _future(store: JobStore) -> datetime:
    return store.server_now() + timedelta(days=1)


def test_task_from_config_is_off_when_disabled(store_url: str) -> None:
    container = build_container(store_url, **{"retention.enabled": "false"})
    store: JobStore = container.job_store()
    try:
        settings = container.settings()
        startup = container.startup_coordinator()
        assert RetentionTask.from_config(store, settings, startup) is None
        on = build_container(store_url, **{"retention.interval": "5m"})
        task = RetentionTask.from_config(store, on.settings(), startup)
        assert task is not None and task.interval == 300
    finally:
        store.close()
