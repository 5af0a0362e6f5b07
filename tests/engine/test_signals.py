"""Signals end to end on every store with real workers: delivery before the timeout (payload as
an argument and through JobContext), timeouts (fail with callbacks, run without payload), a late
signal told TIMED_OUT, a step that starts waiting only once its parent released it, and the
race of eight signalling threads against the timeout sweep."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from dependency_injector import providers

from ratchet_api.model import JobStatus, JobType
from ratchet_api.spi import SignalOutcome
from ratchet_api.store.entities import JobEntity
from ratchet_core.defaults.metrics import NoOpMetricsCollector
from ratchet_core.features.workflow.signals import SignalService
from tests.engine import workflow_targets as t


class Recorder(NoOpMetricsCollector):
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()

    def _add(self, *item: Any) -> None:
        with self._lock:
            self.calls.append(item)

    def signal_waiting(self, job_id: uuid.UUID, job_type: JobType, signal_key: str) -> None:
        self._add("waiting", job_id, signal_key)

    def signal_delivered(
        self, job_id: uuid.UUID, job_type: JobType, signal_key: str, outcome: SignalOutcome
    ) -> None:
        self._add("delivered", job_id, outcome)

    def signal_timed_out(self, job_id: uuid.UUID, job_type: JobType, signal_key: str) -> None:
        self._add("timed_out", job_id, signal_key)

    def signal_cancelled(self, job_id: uuid.UUID, job_type: JobType, signal_key: str) -> None:
        self._add("cancelled", job_id, signal_key)

    def callback_failed(
        self, job_id: uuid.UUID, job_type: JobType, cause: BaseException, attempt: int
    ) -> None:
        self._add("callback_failed", job_id, attempt)

    def names(self, job_id: uuid.UUID) -> list[str]:
        return [c[0] for c in self.calls if c[1] == job_id]


def recorded(engine: Any) -> Recorder:
    recorder = Recorder()
    engine.metrics_collector.override(providers.Object(recorder))
    return recorder


def job(container: Any, job_id: Any) -> JobEntity:
    found = container.job_store().find_by_id(job_id)
    assert found is not None
    return found


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def key() -> str:
    return f"approval-{uuid.uuid4().hex[:8]}"


def test_signal_before_the_timeout_runs_the_job_with_the_payload(
    engine: Any, make_worker: Callable[..., Any]
) -> None:
    metrics = recorded(engine)
    scheduler = engine.scheduler()
    k = key()
    waiting = scheduler.job(t.approve).kwargs(order=7).await_signal(k, timeout=60).enqueue()
    by_context = scheduler.job(t.approve_with_context).args(8).await_signal(f"{k}-ctx").enqueue()
    assert job(engine, waiting).status is JobStatus.AWAITING_SIGNAL
    worker = make_worker(engine)
    worker.start()
    time.sleep(0.3)
    assert job(engine, waiting).status is JobStatus.AWAITING_SIGNAL, "never runs unsignalled"
    decision = scheduler.signal(k, {"by": "ann"})
    assert decision.delivered and decision.delivered_to == (waiting,)
    assert scheduler.signal(by_context, "yes").outcome is SignalOutcome.DELIVERED
    wait_for(lambda: job(engine, waiting).status is JobStatus.SUCCEEDED, 15, "the signalled job")
    wait_for(lambda: job(engine, by_context).status is JobStatus.SUCCEEDED, 15, "the ctx job")
    assert job(engine, waiting).result == '"order 7: ann"'
    assert job(engine, by_context).result == '"order 8 via context: yes"'
    again = scheduler.signal(k, {"by": "bob"})
    assert again.outcome is SignalOutcome.ALREADY_DELIVERED
    assert scheduler.signal(key(), 1).outcome is SignalOutcome.NOT_FOUND
    assert scheduler.signal(uuid.uuid4(), 1).outcome is SignalOutcome.NOT_FOUND
    assert metrics.names(waiting)[:2] == ["waiting", "delivered"]


def test_timeout_fails_the_job_and_a_late_signal_is_told(
    engine: Any, make_worker: Callable[..., Any]
) -> None:
    metrics = recorded(engine)
    scheduler = engine.scheduler()
    k = key()
    builder = scheduler.job(t.approve).kwargs(order=1).await_signal(k, timeout=0.3)
    builder.on_failure(t.report_error, tag="late")
    root = builder.enqueue()
    runs = (
        scheduler.job(t.approve)
        .kwargs(order=2)
        .await_signal(f"{k}-run", timeout=0.3, on_timeout="run")
    )
    run_id = runs.enqueue()
    worker = make_worker(engine)
    worker.start()
    callback = builder.job_ids[1]
    wait_for(
        lambda: job(engine, callback).status is JobStatus.SUCCEEDED, 20, "the failure callback"
    )
    failed = job(engine, root)
    assert failed.status is JobStatus.FAILED
    assert (failed.last_error or "").startswith("SignalTimeout: no signal")
    assert "late: SignalTimeout" in (job(engine, callback).result or "")
    wait_for(lambda: job(engine, run_id).status is JobStatus.SUCCEEDED, 20, "the RUN timeout")
    assert job(engine, run_id).result == '"order 2: no signal"'
    late = scheduler.signal(k, {"by": "too late"})
    assert late.outcome is SignalOutcome.TIMED_OUT
    assert "timed_out" in metrics.names(root)


def test_a_step_waits_for_its_signal_only_after_its_parent(
    engine: Any, make_worker: Callable[..., Any]
) -> None:
    scheduler = engine.scheduler()
    k = key()
    builder = scheduler.job(t.double).args(1).then(t.approve, order=3)
    builder.await_signal(k, timeout=60)
    root = builder.enqueue()
    step = builder.job_ids[1]
    early = scheduler.signal(k, {"by": "early"})
    assert early.outcome is SignalOutcome.NOT_WAITING
    assert job(engine, step).status is JobStatus.WAITING
    assert job(engine, root).status is JobStatus.PENDING, "no worker runs yet"
    worker = make_worker(engine)
    worker.start()
    wait_for(lambda: job(engine, step).status is JobStatus.AWAITING_SIGNAL, 15, "the step to wait")
    assert job(engine, step).signal_deadline is not None
    assert scheduler.signal(k, {"by": "carol"}).delivered
    wait_for(lambda: job(engine, step).status is JobStatus.SUCCEEDED, 15, "the step")
    assert job(engine, step).result == '"order 3: carol"'


def test_cancelling_a_waiting_job_counts_signal_cancelled(engine: Any) -> None:
    metrics = recorded(engine)
    scheduler = engine.scheduler()
    waiting = scheduler.job(t.approve).kwargs(order=9).await_signal(key()).enqueue()
    assert scheduler.cancel(waiting)
    assert "cancelled" in metrics.names(waiting)
    assert scheduler.signal(waiting, 1).outcome is SignalOutcome.NOT_WAITING


def _race_once(
    engine: Any, sweeper: SignalService, metrics: Recorder, order: int
) -> tuple[uuid.UUID, Counter[SignalOutcome], bool]:
    scheduler = engine.scheduler()
    k = key()
    job_id = scheduler.job(t.approve).kwargs(order=order).await_signal(k, timeout=0.001).enqueue()
    time.sleep(0.05)  # past the deadline: the sweep may expire it
    barrier = threading.Barrier(9)
    outcomes: list[SignalOutcome] = []
    expired: list[JobEntity] = []
    lock = threading.Lock()

    def signal(i: int) -> None:
        barrier.wait(10)
        decision = scheduler.signal(k, {"by": f"thread {i}"})
        with lock:
            outcomes.append(decision.jobs[job_id])

    def sweep() -> None:
        barrier.wait(10)
        expired.extend(sweeper.expire_timed_out())

    threads = [threading.Thread(target=signal, args=(i,)) for i in range(8)]
    threads.append(threading.Thread(target=sweep))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return job_id, Counter(outcomes), [e.id for e in expired] == [job_id]


def test_eight_signals_racing_the_timeout_sweep_have_one_winner(engine: Any) -> None:
    metrics = recorded(engine)
    sweeper = SignalService(engine.job_store(), engine.payload_serializer(), metrics)
    for order in range(5):
        job_id, counts, timed_out = _race_once(engine, sweeper, metrics, order)
        final = job(engine, job_id)
        if timed_out:
            assert final.status is JobStatus.FAILED
            assert counts == Counter({SignalOutcome.TIMED_OUT: 8}), counts
        else:
            assert final.status is JobStatus.PENDING
            assert counts[SignalOutcome.DELIVERED] == 1, counts
            assert counts[SignalOutcome.ALREADY_DELIVERED] == 7, counts
        told = [c for c in metrics.calls if c[0] == "delivered" and c[1] == job_id]
        assert len(told) == 8, "every signal is counted with its outcome"
