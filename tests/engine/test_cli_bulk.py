"""``ratchet jobs retry|cancel|delete`` with filters and ``ratchet jobs purge``, run as a user runs
them (the installed script in a subprocess) on a SQLite database the test fills with backdated
jobs; the scheduler's ``*_matching`` methods on every store."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ratchet_api.model import JobStatus
from ratchet_api.store.entities import JobEntity, JobQuery
from ratchet_api.store.protocols import ArchiveStore, JobStore
from ratchet_core.enqueue.bulk import BulkAction
from tests.engine.conftest import build_container, migrate
from tests.engine.test_cli_jobs import ratchet
from tests.engine.test_retention import backdated, where

DAY = timedelta(days=1)


@pytest.fixture
def filled(tmp_path: Path) -> Iterator[tuple[str, JobStore, dict[str, JobEntity]]]:
    url = f"sqlite:///{tmp_path / 'bulk.db'}"
    assert ratchet("db", "upgrade", "--url", url).returncode == 0
    container = build_container(url)
    store: JobStore = container.job_store()
    jobs = {
        "failed_a_old": backdated(store, JobStatus.FAILED, 3 * DAY, "a"),
        "failed_a_new": backdated(store, JobStatus.FAILED, timedelta(hours=1), "a"),
        "failed_b_old": backdated(store, JobStatus.FAILED, 3 * DAY, "b"),
        "failed_other_target": backdated(
            store, JobStatus.FAILED, 3 * DAY, "a", target="tests.engine.targets:add"
        ),
        "pending_a": backdated(store, JobStatus.PENDING, 3 * DAY, "a"),
        "paused_a": backdated(store, JobStatus.PAUSED, 3 * DAY, "a"),
        "succeeded_a": backdated(store, JobStatus.SUCCEEDED, 3 * DAY, "a"),
    }
    store.bulk_insert(list(jobs.values()))
    yield url, store, jobs
    store.close()


def status(store: JobStore, job: JobEntity) -> JobStatus | None:
    found = store.find_by_id(job.id)
    return found.status if found is not None else None


def test_retry_with_filters_dry_run_then_for_real(
    filled: tuple[str, JobStore, dict[str, JobEntity]],
) -> None:
    url, store, jobs = filled
    args = ["--tag", "a", "--target", "tests.engine.targets:greet", "--older-than", "1d"]
    dry = ratchet("jobs", "retry", *args, "--dry-run", "--url", url)
    assert dry.returncode == 0, dry.stderr
    assert "1 job(s) would be retried (dry run" in dry.stdout
    assert status(store, jobs["failed_a_old"]) is JobStatus.FAILED

    done = ratchet("jobs", "retry", *args, "--url", url)
    assert done.returncode == 0, done.stderr
    assert "1 of 1 matching job(s) retried" in done.stdout
    assert status(store, jobs["failed_a_old"]) is JobStatus.PENDING
    for name in ("failed_a_new", "failed_b_old", "failed_other_target"):
        assert status(store, jobs[name]) is JobStatus.FAILED, name


def test_cancel_with_status_filter_and_delete_never_touches_other_jobs(
    filled: tuple[str, JobStore, dict[str, JobEntity]],
) -> None:
    url, store, jobs = filled
    cancelled = ratchet("jobs", "cancel", "--tag", "a", "--url", url)
    assert cancelled.returncode == 0, cancelled.stderr
    # only the unfinished ones of tag a: pending and paused
    assert "2 of 2 matching job(s) cancelled" in cancelled.stdout
    assert status(store, jobs["pending_a"]) is JobStatus.CANCELLED
    assert status(store, jobs["paused_a"]) is JobStatus.CANCELLED
    assert status(store, jobs["succeeded_a"]) is JobStatus.SUCCEEDED

    deleted = ratchet("jobs", "delete", "--status", "failed", "--tag", "a", "--url", url)
    assert deleted.returncode == 0, deleted.stderr
    assert "3 of 3 matching job(s) deleted" in deleted.stdout
    for name in ("failed_a_old", "failed_a_new", "failed_other_target"):
        assert status(store, jobs[name]) is None, name
    assert status(store, jobs["failed_b_old"]) is JobStatus.FAILED

    one = ratchet("jobs", "delete", str(jobs["failed_b_old"].id), "--url", url)
    assert one.returncode == 0 and "deleted" in one.stdout
    assert status(store, jobs["failed_b_old"]) is None


def test_bulk_commands_refuse_to_run_without_a_filter(
    filled: tuple[str, JobStore, dict[str, JobEntity]],
) -> None:
    url, store, jobs = filled
    for command in ("retry", "cancel", "delete"):
        result = ratchet("jobs", command, "--url", url)
        assert result.returncode == 2, command
        assert "at least one filter" in result.stderr
    assert status(store, jobs["pending_a"]) is JobStatus.PENDING
    bad = ratchet("jobs", "delete", "--older-than", "soon", "--url", url)
    assert bad.returncode == 2 and "soon" in bad.stderr
    everything = ratchet("jobs", "cancel", "--all", "--dry-run", "--url", url)
    assert everything.returncode == 0 and "2 job(s) would be cancelled" in everything.stdout


def test_purge_applies_retention_now_with_overrides(
    filled: tuple[str, JobStore, dict[str, JobEntity]],
) -> None:
    url, store, jobs = filled
    default = ratchet("jobs", "purge", "--url", url)
    assert default.returncode == 0, default.stderr
    # nothing is 7 days old yet
    assert "archived" not in default.stdout.split("deleted")[0]
    assert where(store, jobs["succeeded_a"]) == "hot"

    result = ratchet("jobs", "purge", "--succeeded", "2d", "--failed", "never", "--url", url)
    assert result.returncode == 0, result.stderr
    assert "archived 1 SUCCEEDED job(s)" in result.stdout
    assert where(store, jobs["succeeded_a"]) == "archive"
    assert where(store, jobs["failed_a_old"]) == "hot"

    gone = ratchet("jobs", "purge", "--archive", "1d", "--failed", "2d", "--url", url)
    assert gone.returncode == 0, gone.stderr
    assert "deleted 4 archived job(s)" in gone.stdout  # succeeded_a and the three old FAILED
    assert where(store, jobs["succeeded_a"]) == "gone"
    assert where(store, jobs["failed_a_new"]) == "hot"
    bad = ratchet("jobs", "purge", "--archive", "later", "--url", url)
    assert bad.returncode == 2 and "'never'" in bad.stderr


@pytest.fixture
def engine_store(store_url: str) -> Iterator[tuple[Any, JobStore]]:
    container = build_container(store_url)
    store: JobStore = container.job_store()
    migrate(store)
    yield container, store
    container.shutdown_resources()
    store.close()


def test_scheduler_matching_methods_on_every_store(engine_store: tuple[Any, JobStore]) -> None:
    container, store = engine_store
    scheduler = container.scheduler()
    tag = f"bulk-{uuid.uuid4().hex[:10]}"
    dead = [backdated(store, JobStatus.FAILED, 2 * DAY, tag) for _ in range(5)]
    pending = [backdated(store, JobStatus.PENDING, 2 * DAY, tag) for _ in range(3)]
    running = backdated(store, JobStatus.RUNNING, 2 * DAY, tag, owner="elsewhere")
    store.bulk_insert([*dead, *pending, running])
    query = JobQuery(tag=tag)

    counted = scheduler.retry_matching(query, dry_run=True)
    assert (counted.matched, counted.changed, counted.dry_run) == (5, 0, True)
    retried = scheduler.retry_matching(JobQuery(tag=tag, statuses=frozenset({JobStatus.FAILED})))
    assert (retried.action, retried.matched, retried.changed) == (BulkAction.RETRY, 5, 5)
    assert {status(store, j) for j in dead} == {JobStatus.PENDING}

    cancelled = scheduler.cancel_matching(
        JobQuery(tag=tag, statuses=frozenset({JobStatus.PENDING}))
    )
    assert cancelled.changed == 8
    assert status(store, running) is JobStatus.RUNNING

    deleted = scheduler.delete_matching(query)
    assert deleted.changed == 8  # never the running job
    assert status(store, running) is JobStatus.RUNNING
    assert scheduler.delete(running.id) is False
    assert store.capability(ArchiveStore) is not None
