"""End to end on every store (and PostgreSQL through PgBouncer in transaction pooling mode):
enqueue through the scheduler, run with a real worker, read back.

The session databases are shared, so each test selects its own jobs by id.
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
import uuid
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest

from ratchet_api.errors import StoreError
from ratchet_api.model import BackoffPolicy, JobStatus, NodeIdentity
from ratchet_api.store.protocols import JobAuditStore
from tests.conftest import ALL_BACKENDS, PGBOUNCER, backend_url
from tests.engine import targets
from tests.engine.conftest import build_container, migrate


@pytest.fixture(params=[*ALL_BACKENDS, PGBOUNCER])
def store_url(request: pytest.FixtureRequest) -> str:
    """Every store, and PostgreSQL through a transaction-pooling PgBouncer."""
    return backend_url(request, request.param)


def wait_for(predicate: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return bool(predicate())


def status_of(engine: Any, job_id: uuid.UUID) -> JobStatus:
    job = engine.job_store().find_by_id(job_id)
    assert job is not None
    return JobStatus(job.status)


def test_enqueued_job_runs_and_its_result_is_stored(engine: Any, make_worker: Any) -> None:
    scheduler = engine.scheduler()
    job_id = scheduler.enqueue(targets.add, 2, 3)
    stats = make_worker(engine).run_until_idle(20)
    assert stats.idle
    result = scheduler.result(job_id)
    assert result.status is JobStatus.SUCCEEDED
    assert result.value == 5
    job = scheduler.get(job_id)
    assert job.attempt == 1 and job.owner is None and job.finished_at is not None


def test_failing_job_is_retried_then_succeeds(engine: Any, make_worker: Any) -> None:
    key = f"flaky-{uuid.uuid4()}"
    scheduler = engine.scheduler()
    job_id = (
        scheduler.job(targets.flaky)
        .args(key, 2)
        .max_retries(3)
        .backoff(BackoffPolicy.fixed(0.05))
        .enqueue()
    )
    make_worker(engine).run_until_idle(20)
    job = scheduler.get(job_id)
    assert job.status is JobStatus.SUCCEEDED
    assert job.attempt == 3
    assert scheduler.result(job_id).value == f"{key} ok after 3"
    audit = engine.job_store().capability(JobAuditStore)
    if audit is not None:
        records = audit.find_executions_by_job_id(job_id)
        assert [r.status for r in records] == [
            JobStatus.FAILED,
            JobStatus.FAILED,
            JobStatus.SUCCEEDED,
        ]
        assert [r.attempt for r in records] == [1, 2, 3]
        assert "ConnectionError" in (records[0].error or "")


def test_exhausted_retries_dead_letter_with_a_sanitized_error(
    engine: Any, make_worker: Any
) -> None:
    scheduler = engine.scheduler()
    job_id = (
        scheduler.job(targets.fail_always)
        .args("cannot reach postgresql://admin:hunter2@db.internal/app password=hunter2")
        .max_retries(1)
        .backoff(BackoffPolicy.fixed(0.02))
        .enqueue()
    )
    stats = make_worker(engine).run_until_idle(20)
    job = scheduler.get(job_id)
    assert job.status is JobStatus.FAILED
    assert job.attempt == 2  # the first attempt and one retry
    assert job.last_error is not None
    assert "RuntimeError" in job.last_error
    assert "hunter2" not in job.last_error
    assert stats.failed >= 1 and stats.retried >= 1


def test_cancelled_pending_job_never_runs(engine: Any, make_worker: Any) -> None:
    scheduler = engine.scheduler()
    key = f"cancelled-{uuid.uuid4()}"
    job_id = scheduler.enqueue(targets.record, key, 1)
    assert scheduler.cancel(job_id)
    make_worker(engine).run_until_idle(10)
    assert status_of(engine, job_id) is JobStatus.CANCELLED
    assert all(name != key for name, _ in targets.CALLS)


def test_paused_job_waits_until_resumed(engine: Any, make_worker: Any) -> None:
    scheduler = engine.scheduler()
    job_id = scheduler.enqueue(targets.add, 1, 1)
    assert scheduler.pause(job_id)
    make_worker(engine).run_until_idle(10)
    assert status_of(engine, job_id) is JobStatus.PAUSED
    assert scheduler.resume(job_id)
    make_worker(engine).run_until_idle(10)
    assert scheduler.result(job_id).value == 2


def test_scheduled_job_does_not_run_before_its_time(engine: Any, make_worker: Any) -> None:
    scheduler = engine.scheduler()
    scheduled = time.monotonic()
    job_id = scheduler.schedule(timedelta(seconds=5), targets.add, 4, 4)
    worker = make_worker(engine)
    worker.start()
    time.sleep(0.8)
    status = status_of(engine, job_id)
    if time.monotonic() - scheduled < 4:  # a starved machine may get here after the due time
        assert status is JobStatus.PENDING
    assert wait_for(lambda: status_of(engine, job_id) is JobStatus.SUCCEEDED, 10)
    job = scheduler.get(job_id)
    assert job.started_at >= job.scheduled_at


def test_async_jobs_run_concurrently_on_the_event_loop(engine: Any, make_worker: Any) -> None:
    scheduler = engine.scheduler()
    key = f"async-{uuid.uuid4()}"
    ids = [scheduler.enqueue(targets.async_overlap, key, i, 200) for i in range(6)]
    plain = scheduler.enqueue(targets.async_add, 2, 5)
    make_worker(engine, concurrency=6, prefetch=0).run_until_idle(20)
    assert [scheduler.result(i).value for i in ids] == list(range(6))
    assert scheduler.result(plain).value == 7
    assert targets.ASYNC_PEAK[key] > 1  # the coroutines overlapped on one loop


def test_list_of_attrs_instances_is_restored_in_the_running_job(
    engine: Any, make_worker: Any
) -> None:
    scheduler = engine.scheduler()
    orders = [
        targets.Order(id=1, item="tea", price=Decimal("2.50")),
        targets.Order(id=2, item="cake", price=Decimal("3.25")),
    ]
    job_id = scheduler.enqueue(targets.total_price, orders)
    make_worker(engine).run_until_idle(20)
    assert scheduler.result(job_id).value == "5.75"


def test_class_refused_by_a_narrower_policy_at_dispatch_goes_to_dead_letter(
    store_url: str, engine: Any, make_worker: Any
) -> None:
    permissive = build_container(store_url, **{"security.allowed_packages": "tests.,ratchet_api."})
    job_id = permissive.scheduler().enqueue(
        targets.describe_node, NodeIdentity(node_id="n1", host="h")
    )
    # `engine` allows only "tests.": the worker must refuse the stored NodeIdentity hint.
    stats = make_worker(engine).run_until_idle(20)
    job = engine.scheduler().get(job_id)
    assert job.status is JobStatus.FAILED
    assert job.attempt == 1  # refused before running, never retried
    assert "ratchet_api.model.NodeIdentity" in (job.last_error or "")
    assert "refused at dispatch" in (job.last_error or "")
    assert stats.failed >= 1
    permissive.job_store().close()


def test_job_context_log_lines_land_in_the_stored_job_log(engine: Any, make_worker: Any) -> None:
    audit = engine.job_store().capability(JobAuditStore)
    # Every store of this repository keeps job logs: losing JobAuditStore is a regression.
    assert audit is not None, "the store lost the JobAuditStore capability"
    scheduler = engine.scheduler()
    job_id = scheduler.enqueue(targets.uses_context, 21)
    make_worker(engine).run_until_idle(20)
    assert scheduler.result(job_id).value == 42
    lines = audit.find_logs_by_job_id(job_id)
    assert [line.message for line in lines] == ["running with 21"]
    assert lines[0].attempt == 1


def test_completion_of_a_job_cancelled_while_running_does_not_overwrite(
    engine: Any, make_worker: Any
) -> None:
    scheduler = engine.scheduler()
    key = f"gate-{uuid.uuid4()}"
    started = targets.STARTED.setdefault(key, threading.Event())
    release = targets.GATES.setdefault(key, threading.Event())
    job_id = scheduler.enqueue(targets.gate, key)
    worker = make_worker(engine)
    worker.start()
    assert started.wait(10)
    assert scheduler.cancel(job_id)
    release.set()
    assert wait_for(lambda: worker.stats.stale >= 1, 10)
    job = scheduler.get(job_id)
    assert job.status is JobStatus.CANCELLED
    assert job.result is None


def test_jobs_of_a_dead_node_are_recovered_and_exhausted_ones_dead_lettered(
    engine: Any, make_worker: Any
) -> None:
    from ratchet_api.store.entities import NodeEntity

    store = engine.job_store()
    scheduler = engine.scheduler()
    dead = f"dead-{uuid.uuid4().hex[:8]}"
    store.upsert_heartbeat(NodeEntity(node_id=dead))
    retryable = scheduler.job(targets.add).args(20, 22).max_retries(2).enqueue()
    exhausted = scheduler.job(targets.add).args(1, 1).max_retries(0).enqueue()
    claimed: dict[uuid.UUID, int] = {}
    while {retryable, exhausted} - set(claimed):  # the dead node claims both, then "crashes"
        batch = store.claim_next_batch(dead, 50)
        assert batch, "the dead node could not claim the test jobs"
        claimed.update((j.id, j.claim_seq) for j in batch)
        for other in batch:
            if other.id not in (retryable, exhausted):
                store.release_claim(other.id, other.claim_seq)
    # it started both (a claim that never started would not have its attempt counted)
    assert store.mark_dispatched({i: claimed[i] for i in (retryable, exhausted)}) == {
        retryable,
        exhausted,
    }
    time.sleep(2.2)  # node_timeout of the fast settings is 2 s
    worker = make_worker(engine)
    worker.start()
    assert wait_for(
        lambda: (
            status_of(engine, retryable) is JobStatus.SUCCEEDED
            and status_of(engine, exhausted) is JobStatus.FAILED
        ),
        15,
    )
    assert scheduler.get(retryable).attempt == 2  # the lost attempt counted
    assert "WorkerLost" in (scheduler.get(exhausted).last_error or "")
    # the sweep deletes the dead node's row after putting its jobs back, and those jobs may
    # finish first on a fast worker
    assert wait_for(lambda: dead not in {n.node_id for n in store.find_all_nodes()}, 10)


def test_jobs_a_dead_node_claimed_but_never_started_are_not_charged(
    engine: Any, make_worker: Any
) -> None:
    """Issue 17: a dead node's prefetched jobs go back without an attempt, so a job with no
    retries left runs instead of reaching the dead letter without ever running."""
    from ratchet_api.store.entities import NodeEntity

    store = engine.job_store()
    scheduler = engine.scheduler()
    dead = f"dead-{uuid.uuid4().hex[:8]}"
    store.upsert_heartbeat(NodeEntity(node_id=dead))
    job_id = scheduler.job(targets.add).args(2, 3).max_retries(0).enqueue()
    claimed: set[uuid.UUID] = set()
    while job_id not in claimed:  # claimed, never started, then the node "crashes"
        batch = store.claim_next_batch(dead, 50)
        assert batch, "the dead node could not claim the test job"
        claimed.update(j.id for j in batch)
        for other in batch:
            if other.id != job_id:
                store.release_claim(other.id, other.claim_seq)
    time.sleep(2.2)  # node_timeout of the fast settings is 2 s
    worker = make_worker(engine)
    worker.start()
    assert wait_for(lambda: status_of(engine, job_id) is JobStatus.SUCCEEDED, 15)
    assert scheduler.get(job_id).attempt == 1, "only the execution that ran is counted"
    assert scheduler.result(job_id).value == 5


def _one_running_three_queued(
    sqlite_url: str,
) -> tuple[Any, threading.Event, threading.Event, uuid.UUID, list[uuid.UUID]]:
    """A gated job (started event, release event, id) and three jobs enqueued behind it."""
    container = build_container(sqlite_url)
    migrate(container.job_store())
    scheduler = container.scheduler()
    key = f"gate-{uuid.uuid4()}"
    started = targets.STARTED.setdefault(key, threading.Event())
    release = targets.GATES.setdefault(key, threading.Event())
    blocker = scheduler.enqueue(targets.gate, key)
    waiting = [scheduler.enqueue(targets.add, i, i) for i in range(3)]
    return container, started, release, blocker, waiting


def _assert_given_back(scheduler: Any, job_ids: list[uuid.UUID]) -> None:
    for job_id in job_ids:
        job = scheduler.get(job_id)
        assert job.status is JobStatus.PENDING and job.attempt == 0 and job.owner is None


def test_graceful_stop_releases_claimed_jobs_that_did_not_start(
    sqlite_url: str, make_worker: Any
) -> None:
    container, started, release, blocker, waiting = _one_running_three_queued(sqlite_url)
    scheduler = container.scheduler()
    worker = make_worker(container, concurrency=1, prefetch=5)
    worker.start()
    assert started.wait(10)
    assert wait_for(lambda: worker.stats.claimed >= 4, 5)
    threading.Timer(0.3, release.set).start()
    stats = worker.stop(timeout=5)
    assert stats.released == 3
    assert status_of(container, blocker) is JobStatus.SUCCEEDED
    _assert_given_back(scheduler, waiting)
    container.job_store().close()


def test_a_job_finishing_while_the_worker_stops_does_not_start_a_queued_one(
    sqlite_url: str,
) -> None:
    """stop() has stopped claiming but not yet given back the queued jobs when the running job
    finishes: its freed thread must not start the next queued job (a lifecycle hook's
    before_stop runs exactly in that window)."""
    from tests.engine.worker_fixtures import fast_settings

    container, started, release, blocker, waiting = _one_running_three_queued(sqlite_url)
    scheduler = container.scheduler()

    class FinishTheRunningJob:
        def before_start(self) -> None: ...
        def after_start(self) -> None: ...
        def after_stop(self) -> None: ...

        def before_stop(self) -> None:
            release.set()
            wait_for(lambda: status_of(container, blocker) is JobStatus.SUCCEEDED, 10)
            time.sleep(0.3)  # a queued job started by the freed thread would be running now

    worker = container.worker(
        worker_settings=fast_settings(concurrency=1, prefetch=5),
        lifecycle_hooks=[FinishTheRunningJob()],
    )
    worker.start()
    assert started.wait(10)
    assert wait_for(lambda: worker.stats.claimed >= 4, 5)
    stats = worker.stop(timeout=5)
    assert stats.released == 3
    _assert_given_back(scheduler, waiting)
    container.job_store().close()


def test_worker_started_from_python_on_an_unmigrated_store_fails_fast(
    sqlite_url: str, make_worker: Any
) -> None:
    container = build_container(sqlite_url)
    store = container.job_store()
    worker = make_worker(container)
    threads_before = set(threading.enumerate())
    with pytest.raises(StoreError, match=r"has no Ratchet schema yet; run `ratchet db upgrade`"):
        worker.start()
    assert not worker.running
    assert set(threading.enumerate()) <= threads_before  # no poller/heartbeat left looping
    migrate(store)
    job_id = container.scheduler().enqueue(targets.add, 1, 2)
    assert worker.run_until_idle(20).idle
    assert container.scheduler().result(job_id).value == 3


ROLLING_MODULE = "rolling_deploy_jobs"
ROLLING_SOURCE = "def double(x: int) -> int:\n    return 2 * x\n"


def _wait_for(condition: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_job_whose_module_is_missing_on_the_worker_is_retried_until_the_module_appears(
    sqlite_url: str, tmp_path: Any, make_worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A rolling deploy: the application (new code) enqueues, an old worker lacks the module.
    code_dir = tmp_path / "deployed"
    code_dir.mkdir()
    module_file = code_dir / f"{ROLLING_MODULE}.py"
    module_file.write_text(ROLLING_SOURCE)
    monkeypatch.syspath_prepend(str(code_dir))
    monkeypatch.delitem(sys.modules, ROLLING_MODULE, raising=False)
    allowed = {"security.allowed_packages": f"tests.,{ROLLING_MODULE}"}
    app = build_container(sqlite_url, **allowed)
    migrate(app.job_store())
    module = importlib.import_module(ROLLING_MODULE)
    job_id = app.scheduler().job(module.double).args(21).backoff(BackoffPolicy.fixed(1.0)).enqueue()

    module_file.unlink()
    del sys.modules[ROLLING_MODULE]
    importlib.invalidate_caches()
    worker_container = build_container(sqlite_url, **allowed)
    worker = make_worker(worker_container)
    scheduler = worker_container.scheduler()
    worker.start()
    _wait_for(lambda: scheduler.get(job_id).attempt == 1 and worker.stats.retried == 1)
    first = scheduler.get(job_id)
    assert first.status is JobStatus.PENDING  # a failed attempt, not the dead letter
    assert f"module {ROLLING_MODULE} cannot be imported" in (first.last_error or "")
    assert first.scheduled_at >= first.updated_at + timedelta(seconds=0.9)  # after the backoff

    module_file.write_text(ROLLING_SOURCE)  # the new code reaches the worker's machine
    _wait_for(lambda: scheduler.get(job_id).status is JobStatus.SUCCEEDED)
    job = scheduler.get(job_id)
    assert job.attempt == 2
    assert scheduler.result(job_id).value == 42
    worker.stop(timeout=5)
    app.job_store().close()
    worker_container.job_store().close()
