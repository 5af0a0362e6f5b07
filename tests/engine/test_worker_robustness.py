"""Worker robustness: whatever a job raises and whatever a pluggable part does, every claimed
job reaches an outcome and the worker keeps claiming."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest

from ratchet_api.model import JobStatus, PollingConfig
from ratchet_api.spi import PollingDelayStrategy
from ratchet_core.defaults.execution import DefaultExecutionTuningProvider
from ratchet_core.defaults.metrics import NoOpMetricsCollector
from tests.engine import targets
from tests.engine.conftest import build_container, migrate
from tests.engine.test_e2e_worker import status_of, wait_for
from tests.engine.worker_fixtures import fast_settings


def test_job_raising_system_exit_or_cancelled_error_is_a_failed_attempt_not_a_stuck_job(
    engine: Any, make_worker: Any
) -> None:
    scheduler = engine.scheduler()
    exiting = scheduler.job(targets.exits).args(3).max_retries(0).enqueue()
    cancelled = scheduler.job(targets.async_cancelled).max_retries(0).enqueue()
    after = scheduler.enqueue(targets.add, 1, 2)
    stats = make_worker(engine, concurrency=1, prefetch=0).run_until_idle(15)
    assert stats.idle, "a job stayed RUNNING on the worker"
    assert stats.running == 0
    exited = scheduler.get(exiting)
    assert exited.status is JobStatus.FAILED
    assert "SystemExit" in (exited.last_error or "")
    gone = scheduler.get(cancelled)
    assert gone.status is JobStatus.FAILED
    assert "CancelledError" in (gone.last_error or "")
    assert scheduler.result(after).value == 3


def test_stale_completion_of_an_earlier_claim_leaves_the_newer_claim_of_the_same_job_owned(
    sqlite_url: str, make_worker: Any
) -> None:
    # Another node's recovery sweep judged this node dead while it ran the job (a long stall):
    # the job went back to pending and this same node claimed it again. When the first run
    # ends, its refused completion must not make the worker forget the second claim (which
    # would stop its heartbeats and let recovery take the running job away a second time).
    container = build_container(sqlite_url)
    store = container.job_store()
    migrate(store)
    key = f"reclaimed-{uuid.uuid4()}"
    with targets._CALLS_LOCK:
        started = targets.STARTED.setdefault(key, threading.Event())
        release = targets.GATES.setdefault(key, threading.Event())
    scheduler = container.scheduler()
    job_id = scheduler.job(targets.first_gated_then_slow).args(key, 4000).max_retries(5).enqueue()
    worker = make_worker(container)
    worker.start()
    try:
        assert started.wait(10)
        # the stall comes after the start was recorded (its noted mark, written a few ms later)
        assert wait_for(lambda: store.find_by_id(job_id).dispatched_at is not None)
        # a cutoff in the future: the live node counts as dead (as if it had paused)
        assert (
            store.reset_orphan_jobs([worker.node_id], store.server_now() + timedelta(hours=1)) == 1
        )
        assert wait_for(lambda: targets.RUNS.get(key) == 2)
        release.set()
        assert wait_for(lambda: status_of(container, job_id) is JobStatus.SUCCEEDED, 20)
        job = scheduler.get(job_id)
        assert job.attempt == 2
        assert scheduler.result(job_id).value == 2
        assert targets.RUNS[key] == 2
        assert worker.stats.stale == 1
    finally:
        release.set()
        worker.stop(timeout=10)
        store.close()


class _StrategyFailingOnce:
    """A user's polling strategy with a bug that raises once (after an empty poll)."""

    def __init__(self) -> None:
        self.raised = threading.Event()

    def next_delay(self, claimed: int, capacity: int) -> timedelta:
        if not self.raised.is_set():
            self.raised.set()
            raise RuntimeError("bug in a custom polling strategy")
        return timedelta(milliseconds=10)

    def reset(self) -> None:
        pass


class _FailingOnceProvider:
    def __init__(self) -> None:
        self.strategy = _StrategyFailingOnce()

    def create(self, config: PollingConfig) -> PollingDelayStrategy:
        return self.strategy


def test_poller_survives_an_exception_of_a_pluggable_part_and_keeps_claiming(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    container = build_container(sqlite_url)
    store = container.job_store()
    migrate(store)
    provider = _FailingOnceProvider()
    worker = container.worker(worker_settings=fast_settings(), polling=provider)
    worker.start()
    try:
        assert provider.strategy.raised.wait(10)
        job_id = container.scheduler().enqueue(targets.add, 20, 22)
        assert wait_for(lambda: status_of(container, job_id) is JobStatus.SUCCEEDED, 10)
        assert "bug in a custom polling strategy" in caplog.text
    finally:
        worker.stop(timeout=5)
        store.close()


class _TuningFailingOnce(DefaultExecutionTuningProvider):
    """A user's tuning provider with a bug: once armed, its first answer raises."""

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        self.armed = False
        self.raised = False

    def max_concurrency(self, execution_type: str, default_value: int) -> int:
        if self.armed and not self.raised:
            self.raised = True
            raise RuntimeError("bug in a custom tuning provider")
        return super().max_concurrency(execution_type, default_value)


def test_an_error_accepting_one_claimed_job_neither_strands_the_batch_nor_burns_an_attempt(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    container = build_container(sqlite_url)
    store = container.job_store()
    migrate(store)
    scheduler = container.scheduler()
    # a labelled execution target: its concurrency gate is asked for while accepting
    job_ids = [
        scheduler.job(targets.add).args(i, 1).execution_target("gpu").enqueue() for i in range(4)
    ]
    tuning = _TuningFailingOnce(container.settings())
    # node_timeout far beyond the wait: only the worker itself can run every job in time
    settings = fast_settings(node_timeout=timedelta(seconds=120))
    worker = container.worker(worker_settings=settings, tuning=tuning)
    tuning.armed = True  # the first job's gate then fails while accepting the claimed batch
    worker.start()
    try:
        assert wait_for(
            lambda: all(status_of(container, j) is JobStatus.SUCCEEDED for j in job_ids), 10
        )
        assert tuning.raised
        assert "bug in a custom tuning provider" in caplog.text
        attempts = [store.find_by_id(j).attempt for j in job_ids]  # type: ignore[union-attr]
        assert attempts == [1, 1, 1, 1]  # the released claim did not count an attempt
    finally:
        worker.stop(timeout=5)
        store.close()


class _RaisingCollector(NoOpMetricsCollector):
    """A user's metrics collector that breaks its contract: the job callbacks raise."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def job_started(self, job_id: uuid.UUID, job_type: Any, priority: Any) -> None:
        self.calls.append("job_started")
        raise RuntimeError("metrics backend down (started)")

    def job_completed(self, job_id: uuid.UUID, job_type: Any, execution_time_ms: int) -> None:
        self.calls.append("job_completed")
        raise RuntimeError("metrics backend down (completed)")

    def job_failed(
        self, job_id: uuid.UUID, job_type: Any, cause: BaseException, attempt: int
    ) -> None:
        self.calls.append("job_failed")
        raise RuntimeError("metrics backend down (failed)")


def test_a_raising_metrics_collector_never_changes_a_jobs_outcome(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    container = build_container(sqlite_url)
    store = container.job_store()
    migrate(store)
    scheduler = container.scheduler()
    ok = [scheduler.enqueue(targets.add, i, 1) for i in range(3)]
    bad = scheduler.job(targets.fail_always).args("boom").max_retries(0).enqueue()
    collector = _RaisingCollector()
    settings = fast_settings(node_timeout=timedelta(seconds=120))
    worker = container.worker(worker_settings=settings, metrics=collector)
    worker.start()
    try:
        assert wait_for(lambda: all(status_of(container, j) is JobStatus.SUCCEEDED for j in ok))
        assert wait_for(lambda: status_of(container, bad) is JobStatus.FAILED)
        assert {"job_started", "job_completed", "job_failed"} <= set(collector.calls)
        # reported once per callback, not once per job
        messages = [r.getMessage() for r in caplog.records]
        for callback in ("job_started", "job_completed"):
            assert sum(f"_RaisingCollector.{callback} failed" in m for m in messages) == 1
    finally:
        worker.stop(timeout=5)
        store.close()
