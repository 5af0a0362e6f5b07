"""The worker's parts on the TCK memory store, without threads or sleeps (issue 15): the
executor calls one job, ``def`` or ``async def``, through the same call plan."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from dependency_injector import providers

from ratchet_api.errors import TargetNotImportableError
from ratchet_api.model import ExecutionKind, JobInvocation
from ratchet_core.payload.forms import encode_invocation
from ratchet_core.worker.execution import ClaimedJob, GateKey
from ratchet_core.worker.executor import Attempt, JobExecutor
from ratchet_tck.memory import InMemoryJobStore
from tests.engine import targets
from tests.engine.conftest import build_container


@pytest.fixture
def memory() -> Iterator[Any]:
    container = build_container("sqlite:///unused.db")
    store = InMemoryJobStore()
    with container.job_store.override(providers.Object(store)):
        yield container


def executor(container: Any) -> JobExecutor:
    return JobExecutor(
        loader=container.target_loader(),
        arg_resolver=container.pre_execution_arg_resolver(),
        bean_resolver=container.bean_resolver(),
        resilience=container.resilience_strategy(),
        logger_factory=container.job_logger_factory(),
        serializer=container.payload_serializer(),
        sanitizer=container.error_sanitizer(),
        extension=None,
        node_id="node-a",
    )


def claimed(container: Any, target: Any, *args: Any) -> ClaimedJob:
    container.scheduler().enqueue(target, *args)
    (entity,) = container.job_store().claim_next_batch("node-a", 1)
    return ClaimedJob(entity)


def test_a_sync_job_runs_through_the_call_plan(memory: Any) -> None:
    jobs = executor(memory)
    job = claimed(memory, targets.add, 2, 3)
    assert jobs.prepare(job) is None and job.gate == GateKey.of_kind(ExecutionKind.SYNC)
    outcome = jobs.attempt_sync(job)
    assert (outcome.job, outcome.result, outcome.error) == (job, 5, None)
    assert job.called


def test_an_async_job_runs_through_the_same_plan(memory: Any) -> None:
    jobs = executor(memory)
    job = claimed(memory, targets.async_add, 4, 5)
    assert jobs.prepare(job) is None and job.gate == GateKey.of_kind(ExecutionKind.ASYNC)
    outcome: Attempt = asyncio.run(jobs.attempt_async(job))
    assert (outcome.result, outcome.error) == (9, None)


def test_a_failing_job_reports_its_error(memory: Any) -> None:
    jobs = executor(memory)
    job = claimed(memory, targets.fail_always, "boom")
    assert jobs.prepare(job) is None
    outcome = jobs.attempt_sync(job)
    assert isinstance(outcome.error, RuntimeError) and str(outcome.error) == "boom"


def test_prepare_tells_a_missing_target_from_a_refusal(memory: Any) -> None:
    jobs = executor(memory)
    job = claimed(memory, targets.add, 1, 1)
    store = memory.job_store()
    missing = JobInvocation(module="tests.engine.no_such_module", qualname="f", args=())
    stored = store.find_by_id(job.entity.id)
    # a target deployed elsewhere (its row names it too: a payload naming another target than
    # the row's column is refused as altered, see test_hostile_rows)
    job.entity = attrs.evolve(stored, target=missing.target, payload=encode_invocation(missing))
    assert isinstance(jobs.prepare(job), TargetNotImportableError)
    job.entity = attrs.evolve(stored, attempt=stored.max_retries + 2)
    refusal = jobs.prepare(job)
    assert isinstance(refusal, str) and refusal.startswith("WorkerLost")


def test_the_producer_never_claims_more_than_the_free_slots(memory: Any) -> None:
    from ratchet_core.defaults.metrics import NoOpMetricsCollector
    from ratchet_core.worker.poller_guard import PollerGuard
    from ratchet_core.worker.producer import Producer
    from ratchet_core.worker.table import ClaimedJobs

    store = memory.job_store()
    for n in range(6):
        memory.scheduler().enqueue(targets.add, n, n)
    woken: list[bool] = []
    slots = ClaimedJobs(
        concurrency=2,
        prefetch=1,
        backlog=10,
        watermark=2,
        gate_limit=lambda key: 2,
        on_free=lambda: woken.append(True),
    )
    held: list[ClaimedJob] = []

    def take(claim: Any) -> None:
        for entity in claim.jobs:
            job = ClaimedJob(entity)
            slots.add(job)
            held.append(job)

    def give_back(count: int = 1) -> None:
        for _ in range(count):
            job = held.pop(0)
            slots.hand_over(job)
            slots.written(job)

    producer = Producer(
        slots,
        lambda limit: store.claim_next_batch("node-a", limit),
        PollerGuard("node-a", memory.circuit_breaker_config_provider(), NoOpMetricsCollector()),
        batch_size=100,
    )
    first = producer.poll_once()
    assert first is not None and (len(first.jobs), first.asked) == (3, 3)
    take(first)
    assert slots.in_use == 3
    assert producer.poll_once() is None  # no free slot: nothing claimed
    give_back()
    assert woken == [True]
    # busy (2 >= busy_at) with 1 free slot, below the watermark of 2: wait for a bigger claim
    assert producer.poll_once() is None
    give_back()
    second = producer.poll_once()
    assert second is not None and (len(second.jobs), second.asked) == (2, 2)
    take(second)
    assert slots.in_use == 3
    running = store.claim_next_batch("node-b", 100)
    assert len(running) == 1  # the sixth job was never claimed by node-a
    give_back(3)
    assert slots.wait_until_empty(0)


def test_the_completer_writes_successes_and_failures_fenced(memory: Any) -> None:
    from datetime import timedelta

    from ratchet_api.model import JobStatus
    from ratchet_api.store.entities import Completion
    from ratchet_core.defaults.metrics import NoOpMetricsCollector
    from ratchet_core.worker.completion import (
        CompletionBatcher,
        PendingCompletion,
        PendingFailure,
    )

    store = memory.job_store()
    ids = [memory.scheduler().enqueue(targets.add, n, n) for n in range(4)]
    claims = {j.id: j for j in store.claim_next_batch("node-a", 10)}
    flushed: list[list[PendingCompletion]] = []
    failures: list[tuple[PendingFailure, bool | None]] = []
    completer = CompletionBatcher(
        store,
        interval=0,
        batch_size=10,
        on_flushed=lambda batch, applied: flushed.append(list(applied)),
        metrics=NoOpMetricsCollector(),
        on_failure=lambda item, applied: failures.append((item, applied)),
        start=False,
    )
    ok, retry, dead, stale = (claims[i] for i in ids)
    completer.succeed(
        PendingCompletion(Completion(job_id=ok.id, claim_seq=ok.claim_seq, result="0"), None)
    )
    later = store.server_now() + timedelta(hours=1)
    completer.fail(PendingFailure(retry.id, retry.claim_seq, "OSError: disk", later))
    completer.fail(PendingFailure(dead.id, dead.claim_seq, "ValueError: bad", None))
    completer.fail(PendingFailure(stale.id, stale.claim_seq + 1, "OSError: late", later))
    assert completer.pending == 4
    completer.drain()
    assert completer.pending == 0
    assert [len(applied) for applied in flushed] == [1]
    assert [applied for _, applied in failures] == [True, True, False]
    statuses = [store.find_by_id(i).status for i in ids]
    assert statuses == [
        JobStatus.SUCCEEDED,
        JobStatus.PENDING,
        JobStatus.FAILED,
        JobStatus.RUNNING,
    ]
