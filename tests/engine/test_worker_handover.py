"""The hand-over of an outcome from a job thread to the completer, and the give-back at stop()
(issue 23, second review): a job that began is never given back uncharged, a job not begun by
the halt never starts, a second finish of one claim reports nothing, a broken hand-over still
lets the job leave the table, and an outcome leaves the table once.

The worker's own parts (table, runner, dispatcher, subscriber) on the TCK memory store, driven
from the test thread: every interleaving is replayed step by step, so nothing waits on time."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import attrs
import pytest
from dependency_injector import providers

from ratchet_api.errors import TransientStoreError
from ratchet_api.model import JobStatus, JobType
from ratchet_api.store.entities import Completion
from ratchet_api.workflow import ParentResult
from ratchet_core.defaults.metrics import NoOpMetricsCollector
from ratchet_core.worker.completion import CompletionBatcher, PendingCompletion, PendingWrite
from ratchet_core.worker.execution import ClaimedJob
from ratchet_core.worker.executor import JobExecutor
from ratchet_core.worker.outcome import OutcomeKind, Returned, Shutdown
from ratchet_tck.memory import InMemoryJobStore
from tests.engine import targets
from tests.engine import workflow_targets as wt
from tests.engine.conftest import build_container
from tests.engine.worker_fixtures import fast_settings


class _Recorded(NoOpMetricsCollector):
    """Records the job outcomes reported to metrics."""

    def __init__(self) -> None:
        self.completed: list[UUID] = []
        self.failed: list[UUID] = []

    def job_completed(self, job_id: UUID, job_type: JobType, execution_time_ms: int) -> None:
        self.completed.append(job_id)

    def job_failed(
        self, job_id: UUID, job_type: JobType, error: BaseException, attempt: int
    ) -> None:
        self.failed.append(job_id)


class _Parts:
    """A worker's parts, not started: its completer flushes only when the test says so."""

    def __init__(self, **config: Any) -> None:
        self.store = InMemoryJobStore()
        self.metrics = _Recorded()
        self.container = build_container(
            "sqlite:///unused.db", **{"cluster.backend": "none", **config}
        )
        self.container.job_store.override(providers.Object(self.store))
        self.container.metrics_collector.override(providers.Object(self.metrics))
        worker = self.container.worker(worker_settings=fast_settings())
        self.p = worker._parts
        self.p.completer = CompletionBatcher(
            self.store,
            interval=0,
            batch_size=100,
            metrics=NoOpMetricsCollector(),
            subscribers=[self.p.subscriber],
            start=False,
        )

    def claim(self, target: Callable[..., Any], *args: Any) -> ClaimedJob:
        job_id = self.container.scheduler().enqueue(target, *args)
        (entity,) = self.store.claim_next_batch(self.p.node_id, 1)
        assert entity.id == job_id
        job = ClaimedJob(entity)
        self.p.table.add(job)
        return job

    def flush(self) -> None:
        assert self.p.completer is not None
        self.p.completer.drain()

    def stored(self, job: ClaimedJob) -> Any:
        found = self.store.find_by_id(job.entity.id)
        assert found is not None
        return found

    def close(self) -> None:
        self.container.metrics_collector.reset_override()
        self.container.job_store.reset_override()


@pytest.fixture
def parts() -> Iterator[_Parts]:
    made = _Parts()
    yield made
    made.close()


# ---------------------------------------------------------------- finding 1: stop's give-back


def test_a_job_that_began_before_its_give_back_is_not_released(parts: _Parts) -> None:
    # the job began on its thread (before the halt), and is then given back (stop()'s
    # snapshot, or a failure on the inline path): the give-back must be refused. Releasing it
    # uncharged would let another worker run it while this one still runs it.
    p = parts.p
    job = parts.claim(targets.add, 1, 2)
    assert p.table.begin(job)
    p.table.halt()
    p.dispatcher.abandon(job)
    parts.flush()
    stored = parts.stored(job)
    assert stored.status is JobStatus.RUNNING
    assert stored.claim_seq == job.entity.claim_seq
    assert p.table.running == 1 and p.table.unwritten == 0
    assert p.snapshot().released == 0
    # its own outcome path still accounts for it
    p.runner.finish(job, p.runner.decide(job, Returned("3")))
    parts.flush()
    assert parts.stored(job).status is JobStatus.SUCCEEDED
    assert p.table.empty


def test_a_job_not_begun_when_the_worker_halts_never_starts_and_is_given_back(
    parts: _Parts,
) -> None:
    p = parts.p
    job = parts.claim(targets.add, 1, 2)
    p.table.halt()
    assert not p.table.begin(job), "a job not started by halt() must never start"
    assert p.table.queued() == [job]
    p.dispatcher.abandon(job)
    parts.flush()
    stored = parts.stored(job)
    assert stored.status is JobStatus.PENDING
    assert stored.last_error is None
    assert p.table.empty
    assert p.snapshot().released == 1


def test_a_runner_failure_on_the_inline_path_is_a_failed_attempt_not_a_give_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = _Parts(**{"worker.threading_mode": "inline"})
    try:
        p = made.p
        assert p.inline
        job = made.claim(targets.add, 1, 2)
        real = p.runner.run_sync

        def broken(claimed: ClaimedJob) -> ClaimedJob | None:
            # a bug in the runner after the job began: no real part raises there today, so
            # it is injected (the dispatcher's guard is what is tested)
            assert p.table.begin(claimed)
            raise RuntimeError("runner bug")

        monkeypatch.setattr(p.runner, "run_sync", broken)
        p.dispatcher.accept(job)
        monkeypatch.setattr(p.runner, "run_sync", real)
        made.flush()
        stored = made.stored(job)
        # retried with backoff and the attempt charged, not released to run again at once
        assert stored.status is JobStatus.PENDING
        assert "runner bug" in (stored.last_error or "")
        assert p.snapshot().retried == 1 and p.snapshot().released == 0
        assert p.table.empty
    finally:
        made.close()


_loop_held = threading.Event()
_let_go = threading.Event()
_ran: list[str] = []


async def hold_the_loop() -> str:
    """Blocks the worker's event loop thread (a synchronous wait inside ``async def``) until
    the test lets go: async jobs given a slot meanwhile stay QUEUED on the loop."""
    _loop_held.set()
    _let_go.wait(60)
    return "held"


async def queued_behind(name: str) -> str:
    _ran.append(name)
    return name


def _stored(store: InMemoryJobStore, job_id: UUID) -> Any:
    found = store.find_by_id(job_id)
    assert found is not None
    return found


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    # waits on a state of the store or the table (no fixed sleep: woken as soon as it holds)
    pause = threading.Event()
    for _ in range(6000):
        if condition():
            return
        pause.wait(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def test_stop_gives_back_async_jobs_queued_on_a_busy_loop_and_never_starts_them() -> None:
    _loop_held.clear()
    _let_go.clear()
    _ran.clear()
    made = _Parts()
    worker = made.container.worker(worker_settings=fast_settings())
    scheduler = made.container.scheduler()
    stopped: list[Any] = []
    stopper = threading.Thread(target=lambda: stopped.append(worker.stop()))
    try:
        holder = scheduler.enqueue(hold_the_loop)
        worker.start()
        assert _loop_held.wait(60)
        behind = [scheduler.enqueue(queued_behind, f"job-{n}") for n in range(2)]
        table = worker._parts.table
        _wait_for(lambda: table.in_use == 3, "the jobs behind the busy loop to be claimed")
        stopper.start()
        # stop() gives them back while the loop is still busy with the first job
        _wait_for(
            lambda: all(_stored(made.store, i).status is JobStatus.PENDING for i in behind),
            "the queued jobs to be given back",
        )
    finally:
        _let_go.set()
        if stopper.ident is not None:  # started
            stopper.join(60)
        else:
            worker.stop()
        made.close()
    assert stopped and stopped[0].abandoned == 0 and stopped[0].released == 2
    assert _ran == [], "a job given back must never start"
    assert _stored(made.store, holder).status is JobStatus.SUCCEEDED
    for job_id in behind:
        stored = _stored(made.store, job_id)
        assert stored.status is JobStatus.PENDING and stored.last_error is None


def test_stop_sees_an_older_claim_of_a_job_re_claimed_as_ours(parts: _Parts) -> None:
    # this node's recovery re-claimed a job it still held (after a heartbeat lapse): the older
    # claim, QUEUED behind its gate, must still be given back at stop, not left to hold the
    # shutdown for its whole timeout
    p = parts.p
    older = parts.claim(targets.add, 1, 2)
    newer = ClaimedJob(attrs.evolve(older.entity, claim_seq=older.entity.claim_seq + 1))
    p.table.add(newer)
    assert p.table.owned_ids() == [older.entity.id]  # heartbeated once, as the newer claim
    p.table.halt()
    queued = p.table.queued()
    assert len(queued) == 2 and older in queued and newer in queued
    for job in queued:
        p.dispatcher.abandon(job)
    assert p.table.wait_until_none_active(0)
    parts.flush()
    assert p.table.empty


# ---------------------------------------------------------------- finding 3: report once taken


def test_a_job_requeued_at_stop_that_then_completes_reports_no_success(parts: _Parts) -> None:
    p = parts.p
    job = parts.claim(targets.add, 1, 2)
    assert p.table.begin(job)
    shutdown = p.runner.decide(job, Shutdown(started=True, reason="WorkerShutdown: test"))
    p.runner.finish(job, shutdown)
    # the job's own thread finishes afterwards: its outcome is dropped, and so is its report
    p.runner.finish(job, p.runner.decide(job, Returned("3")))
    parts.flush()
    assert parts.metrics.completed == []
    assert parts.stored(job).status is JobStatus.PENDING
    assert p.snapshot().succeeded == 0


def test_a_job_that_finished_before_stop_requeued_it_is_not_reported_abandoned(
    parts: _Parts, caplog: pytest.LogCaptureFixture
) -> None:
    p = parts.p
    job = parts.claim(targets.fail_always, "boom")
    assert p.table.begin(job)
    failed = p.runner.decide(job, Shutdown(started=True, reason="x"))  # built before it ended
    p.runner.finish(job, p.runner.decide(job, Returned("3")))
    with caplog.at_level(logging.WARNING, logger="ratchet.worker"):
        p.runner.finish(job, failed)
    assert "still running at shutdown" not in caplog.text
    # stop() counts as abandoned only the hand-overs taken
    assert p.runner.hand(job, failed) == (False, None)
    assert parts.metrics.completed == [job.entity.id] and parts.metrics.failed == []
    parts.flush()
    assert parts.stored(job).status is JobStatus.SUCCEEDED


# ---------------------------------------------------------------- finding 4: last resort


def test_a_job_whose_failure_cannot_be_handed_over_leaves_the_table_for_recovery(
    parts: _Parts, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = parts.p
    job = parts.claim(targets.add, 1, 2)

    def broken_pending(claimed: ClaimedJob, outcome: Any) -> Any:
        # no concrete trigger exists today (the reviewer found none): a bug is injected
        raise RuntimeError("hand-over bug")

    def run(claimed: ClaimedJob) -> ClaimedJob | None:
        assert p.table.begin(claimed)
        raise RuntimeError("runner bug")

    monkeypatch.setattr(p.runner, "_pending", broken_pending)
    assert p.dispatcher._guarded(job, run) is None
    # no longer RUNNING here nor heartbeated: the stale-job sweep recovers it
    assert job.entity.id not in p.table.owned_ids()
    assert p.table.empty and p.table.running == 0 and p.table.in_use == 0


# ---------------------------------------------------------------- finding 5: told once


def test_an_outcome_leaves_the_table_once_however_often_it_is_reported_written(
    parts: _Parts,
) -> None:
    p = parts.p
    first = parts.claim(targets.add, 1, 2)
    second = parts.claim(targets.add, 3, 4)
    for job in (first, second):
        assert p.table.begin(job)
    p.table.hand_over(first)
    p.table.written(first)
    p.table.written(first)  # told twice (a give-up after it was written)
    assert p.table.unwritten == 0 and p.table.in_use == 1
    assert not p.table.wait_until_empty(0), "the second job is still running"
    p.table.hand_over(second)
    assert p.table.unwritten == 1
    p.table.written(second)
    assert p.table.empty


class _OneTransientBatchFailure(InMemoryJobStore):
    """The batch of successes fails transiently once (retried at once by the completer)."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 1

    def mark_succeeded_many(self, completions: Sequence[Completion]) -> set[UUID]:
        if self.failures:
            self.failures -= 1
            raise TransientStoreError("connection lost")
        return super().mark_succeeded_many(completions)


class _BrokenRetryMetric(NoOpMetricsCollector):
    """A metrics collector with a bug (the worker guards its own; a completer given a raw one
    is how the flusher's catch-all is reached for real)."""

    def success_finalization_retried(self, job_id: UUID, job_type: JobType) -> None:
        raise RuntimeError("metrics bug")


class _Recorder:
    """An OutcomeSubscriber that records what it was told (on the flusher thread)."""

    def __init__(self) -> None:
        self.writes: list[tuple[UUID, bool | None]] = []
        self.successes: list[tuple[list[UUID], list[UUID]]] = []

    def succeeded(
        self, batch: Sequence[PendingCompletion], applied: Sequence[PendingCompletion]
    ) -> None:
        self.successes.append(
            ([i.completion.job_id for i in batch], [i.completion.job_id for i in applied])
        )

    def wrote(self, item: PendingWrite, applied: bool | None) -> None:
        self.writes.append((item.job_id, applied))


def test_the_flusher_s_catch_all_gives_up_only_what_it_had_not_told() -> None:
    store = _OneTransientBatchFailure()
    container = build_container("sqlite:///unused.db", **{"cluster.backend": "none"})
    with container.job_store.override(providers.Object(store)):
        scheduler = container.scheduler()
        retried_id = scheduler.enqueue(targets.fail_always, "boom")
        done_id = scheduler.enqueue(targets.add, 1, 2)
    claimed = {job.id: job for job in store.claim_next_batch("node-a", 2)}
    told = _Recorder()
    batcher = CompletionBatcher(
        store,
        interval=0,
        batch_size=100,
        metrics=_BrokenRetryMetric(),
        subscribers=[told],
        start=False,
        sleep=lambda seconds: None,
    )
    run_at = datetime.now(UTC) + timedelta(minutes=5)
    retried = claimed[retried_id]
    batcher.write(
        PendingWrite(
            retried.id, retried.claim_seq, "boom", run_at, kind=OutcomeKind.RETRY, started=True
        )
    )
    done = claimed[done_id]
    batcher.succeed(
        PendingCompletion(Completion(job_id=done.id, claim_seq=done.claim_seq, result="3"), None)
    )
    batcher._thread.start()  # one flush takes both (queued before the flusher started)
    batcher.close()
    # the retry was written and told once; the success (its write applied, but the flush
    # failed before telling it) is given up: told once, as not written
    assert told.writes == [(retried_id, True)]
    assert told.successes == [([done_id], [])]


# ---------------------------------------------------------------- finding 2: off the loop


async def async_add_one(value: ParentResult[int]) -> int:
    """An ``async def`` workflow step with a late-bound argument (the parent's result)."""
    return value + 1


class _SlowReads(InMemoryJobStore):
    """Reading the job ``slow_id`` waits until ``release`` is set (at most 30 s, so a read
    made on the event loop fails the test instead of hanging it); ``reading`` is set when the
    read starts."""

    def __init__(self) -> None:
        super().__init__()
        self.slow_id: UUID | None = None
        self.reading = threading.Event()
        self.release = threading.Event()
        self.released: bool | None = None

    def find_by_id(self, job_id: UUID) -> Any:
        if job_id == self.slow_id and self.released is None:
            self.reading.set()
            self.released = self.release.wait(30)
        return super().find_by_id(job_id)


def test_an_async_step_reads_its_late_bound_arguments_off_the_event_loop() -> None:
    store = _SlowReads()
    container = build_container("sqlite:///unused.db", **{"cluster.backend": "none"})
    with container.job_store.override(providers.Object(store)):
        builder = container.scheduler().job(wt.double).args(20).then(async_add_one)
        builder.enqueue()
        first, second = builder.job_ids
        (parent,) = store.claim_next_batch("node-a", 1)
        assert parent.id == first
        assert store.mark_succeeded(parent.id, parent.claim_seq, "40")
        executor = JobExecutor(
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
        child = store.find_by_id(second)
        assert child is not None
        step = ClaimedJob(child)
        assert executor.prepare(step) is None and step.is_async
        store.slow_id = second

        async def another_async_job() -> None:
            # runs on the loop while the step's arguments are being read; it is what lets
            # the read finish, so a read made on the loop would wait for it in vain
            await asyncio.to_thread(store.reading.wait, 30)
            store.release.set()

        async def both() -> Any:
            attempt, _ = await asyncio.gather(executor.attempt_async(step), another_async_job())
            return attempt

        attempt = asyncio.run(both())
    assert store.released is True, "the store read stalled the event loop"
    assert (attempt.result, attempt.error) == (41, None)
