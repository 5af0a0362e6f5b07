"""The three defects of issue 23, each fixed in the new shape of the worker, and a refused
workflow step settling its children at once. All on the TCK memory store (real worker threads,
no sleeps: the tests wait on job states)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from dependency_injector import providers

from ratchet_api.model import JobStatus, PollingConfig
from ratchet_core.worker.outcome import DEFAULT_CIRCUIT_DELAY, SANITIZER_FAILED
from ratchet_tck.memory import InMemoryJobStore
from tests.engine import targets
from tests.engine import workflow_targets as wt
from tests.engine.conftest import build_container
from tests.engine.worker_fixtures import fast_settings


class _MemoryStore(InMemoryJobStore):
    """The TCK memory store; another node's permit on "printer" (taken by a test) is given back
    once a job was deferred for want of it, so the deferral happens whatever the timing."""

    def defer_claim(self, job_id: UUID, claim_seq: int, run_at: datetime) -> bool:
        applied = super().defer_claim(job_id, claim_seq, run_at)
        self.release_permit("printer", "another-node")
        return applied


@pytest.fixture
def store() -> InMemoryJobStore:
    return _MemoryStore()


@pytest.fixture
def on_memory(store: InMemoryJobStore) -> Iterator[Callable[..., Any]]:
    """``on_memory(**config)``: a container whose job store is the shared memory store."""
    made: list[Any] = []

    def container(**config: Any) -> Any:
        values = {"cluster.backend": "none", **config}
        built = build_container("sqlite:///unused.db", **values)
        built.job_store.override(providers.Object(store))
        made.append(built)
        return built

    yield container
    for built in made:
        built.job_store.reset_override()


def _job(store: InMemoryJobStore, job_id: Any) -> Any:
    found = store.find_by_id(job_id)
    assert found is not None
    return found


# ---------------------------------------------------------------- burst waits for deferrals


class _ClosedOnce:
    """A ResilienceStrategy whose circuit rejects the first call only, due again after 1 s."""

    def __init__(self) -> None:
        self.asked = 0

    def execute(
        self, service_name: str, task: Callable[[], Any], exception_filter: Any = None
    ) -> Any:
        return task()

    def is_service_available(self, service_name: str) -> bool:
        self.asked += 1
        return self.asked > 1

    def get_retry_delay(self, service_name: str) -> timedelta:
        return timedelta(seconds=1)


@pytest.mark.parametrize("deferred_by", ["permit", "rate_limit", "circuit"])
def test_run_until_idle_waits_for_jobs_deferred_by_flow_control_or_a_circuit(
    on_memory: Callable[..., Any], store: InMemoryJobStore, deferred_by: str
) -> None:
    """``ratchet worker --burst`` is ``run_until_idle``: a job deferred by a permit, a rate
    limit or an open circuit, due again within the timeout, runs before it returns."""
    container = on_memory(**{"flow_control.retry_delay": "1s"})
    scheduler = container.scheduler()
    if deferred_by == "permit":
        # another node holds the only permit until the job was deferred once
        assert store.try_acquire_permit("printer", "another-node", 1, timedelta(minutes=5))
        ids = [scheduler.job(targets.add).args(1, 2).resource("printer", permits=1).enqueue()]
    elif deferred_by == "rate_limit":
        # one start per 2 s: of three jobs claimed together, two are deferred
        ids = [
            scheduler.job(targets.add).args(n, 1).rate_limit("api", 1, per=2.0).enqueue()
            for n in range(3)
        ]
    else:
        container.resilience_strategy.override(providers.Object(_ClosedOnce()))
        ids = [scheduler.job(targets.guarded_call).args(7).enqueue()]
    worker = container.worker(worker_settings=fast_settings())
    stats = worker.run_until_idle(timeout=60)
    assert stats.idle
    assert stats.deferred + stats.released >= 1  # (flow control counts as released)
    assert [_job(store, i).status for i in ids] == [JobStatus.SUCCEEDED] * len(ids)


# ---------------------------------------------------------------- a sanitizer that raises


class _RaisingSanitizer:
    def sanitize(self, error: BaseException) -> str:
        raise RuntimeError("sanitizer bug")


def test_a_raising_error_sanitizer_never_leaves_the_failed_job_running(
    on_memory: Callable[..., Any], store: InMemoryJobStore
) -> None:
    container = on_memory()
    container.error_sanitizer.override(providers.Object(_RaisingSanitizer()))
    job_id = container.scheduler().job(targets.fail_always).args("secret=hunter2").enqueue()
    retried = container.scheduler().job(targets.fail_always).args("x").max_retries(0).enqueue()
    stats = container.worker(worker_settings=fast_settings()).run_until_idle(timeout=30)
    assert stats.idle, "a job was left RUNNING"
    dead = _job(store, retried)
    assert dead.status is JobStatus.FAILED
    assert (dead.last_error or "").endswith(f" {SANITIZER_FAILED}")
    first = _job(store, job_id)
    assert first.status in (JobStatus.PENDING, JobStatus.FAILED)
    assert (first.last_error or "").endswith(f" {SANITIZER_FAILED}")
    assert "hunter2" not in (first.last_error or "")


# ---------------------------------------------------------------- an unusable circuit delay


class _OpenCircuit:
    """A ResilienceStrategy whose circuit is always open and whose retry delay is unusable."""

    def __init__(self, delay: object) -> None:
        self.delay = delay

    def execute(
        self, service_name: str, task: Callable[[], Any], exception_filter: Any = None
    ) -> Any:
        raise AssertionError("never called through an open circuit")

    def is_service_available(self, service_name: str) -> bool:
        return False

    def get_retry_delay(self, service_name: str) -> object:
        return self.delay


@pytest.mark.parametrize("delay", [None, timedelta(seconds=-5)], ids=["none", "negative"])
def test_an_unusable_circuit_retry_delay_defers_the_job_by_the_default(
    on_memory: Callable[..., Any],
    store: InMemoryJobStore,
    delay: object,
    caplog: pytest.LogCaptureFixture,
) -> None:
    container = on_memory()
    container.resilience_strategy.override(providers.Object(_OpenCircuit(delay)))
    job_id = container.scheduler().job(targets.guarded_call).args(1).enqueue()
    before = store.server_now()
    with caplog.at_level(logging.ERROR, logger="ratchet.worker"):
        stats = container.worker(worker_settings=fast_settings()).run_until_idle(timeout=10)
    after = store.server_now()
    assert stats.idle, "the job was left RUNNING"
    job = _job(store, job_id)
    assert (job.status, job.attempt, job.owner) == (JobStatus.PENDING, 0, None)
    assert before + DEFAULT_CIRCUIT_DELAY <= job.scheduled_at <= after + DEFAULT_CIRCUIT_DELAY
    assert any(
        "get_retry_delay('tests-guarded')" in r.getMessage()
        and "not a timedelta >= 0" in r.getMessage()
        for r in caplog.records
    )


# ---------------------------------------------------------------- refused workflow steps


def test_a_workflow_step_refused_at_dispatch_settles_its_children_at_once(
    on_memory: Callable[..., Any], store: InMemoryJobStore
) -> None:
    """The worker's allowlist no longer admits the step's package: the step is refused at
    dispatch (dead letter) and its children are settled by the worker, not hours later by the
    maintenance sweep."""
    enqueuer = on_memory()
    builder = enqueuer.scheduler().job(wt.double).args(2).then(wt.add_one)
    builder.enqueue()
    parent, child = builder.job_ids
    assert _job(store, child).status is JobStatus.WAITING
    worker_side = on_memory(**{"security.allowed_packages": "ratchet_core.demo_jobs"})
    worker = worker_side.worker(worker_settings=fast_settings(recovery_interval=timedelta(hours=1)))
    stats = worker.run_until_idle(timeout=30)
    assert stats.idle and stats.failed == 1
    assert _job(store, parent).status is JobStatus.FAILED
    assert _job(store, child).status is JobStatus.CANCELLED


def test_a_burst_in_slices_waits_for_a_deferred_job_due_before_its_own_deadline(
    on_memory: Callable[..., Any], store: InMemoryJobStore
) -> None:
    """``ratchet worker --burst`` runs ``run_until_idle`` in half-second slices (so that a
    signal is acted on between two): a job deferred beyond one slice but within the burst's
    timeout still runs before the burst ends."""
    from ratchet_core.cli.worker import _run_burst
    from ratchet_core.runtime.process_signals import WorkerSignals

    container = on_memory(**{"flow_control.retry_delay": "1s"})
    assert store.try_acquire_permit("printer", "another-node", 1, timedelta(minutes=5))
    job_id = (
        container.scheduler().job(targets.add).args(2, 2).resource("printer", permits=1).enqueue()
    )
    worker = container.worker(worker_settings=fast_settings())
    worker.start()
    stats = _run_burst(worker, 60.0, WorkerSignals())  # not installed: no signal handlers
    assert stats.idle
    assert stats.released >= 1  # deferred by flow control once at least
    assert _job(store, job_id).status is JobStatus.SUCCEEDED


# ---------------------------------------------------------------- idleness without the poll wait


def test_run_until_idle_does_not_wait_for_the_pollers_interval(
    on_memory: Callable[..., Any], store: InMemoryJobStore
) -> None:
    """Idleness takes two empty polls, the second begun after the first ended: it is asked
    for at once, so a worker whose idle poll interval (here 30 s) is longer than the whole
    ``run_until_idle`` timeout (10 s) still finds itself idle within it."""
    container = on_memory()
    job_id = container.scheduler().enqueue(targets.add, 1, 1)
    slow = PollingConfig(min_interval=timedelta(seconds=30), max_interval=timedelta(seconds=30))
    worker = container.worker(worker_settings=fast_settings(polling=slow))
    stats = worker.run_until_idle(timeout=10)
    assert stats.idle
    assert _job(store, job_id).status is JobStatus.SUCCEEDED
