"""The worker's parts come from a container (issue 23): one part overridden the
dependency-injector way is the one a worker built by the Ratchet container uses, and a part
taken from the parts container alone runs a job to its outcome, on the TCK memory store,
without threads or sleeps."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import pytest
from dependency_injector import providers

from ratchet_api.errors import SchedulerStoppedError
from ratchet_api.model import JobStatus
from ratchet_core.defaults.metrics import NoOpMetricsCollector
from ratchet_core.runtime.worker_parts import parts_for_worker
from ratchet_core.worker.completion import CompletionBatcher, PendingCompletion
from ratchet_core.worker.execution import ClaimedJob, GateKey
from ratchet_core.worker.stats import Counters
from ratchet_tck.memory import InMemoryJobStore
from tests.engine import targets
from tests.engine.conftest import build_container
from tests.engine.worker_fixtures import fast_settings


class RecordingCompleter(CompletionBatcher):
    """The default completer, recording the ids of the successes handed to it."""

    def __init__(self, *args: Any, seen: list[UUID], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen = seen

    def succeed(self, item: PendingCompletion) -> None:
        self.seen.append(item.completion.job_id)
        super().succeed(item)


@pytest.fixture
def memory() -> Iterator[tuple[Any, InMemoryJobStore]]:
    container = build_container("sqlite:///unused.db", **{"cluster.backend": "none"})
    store = InMemoryJobStore()
    with container.job_store.override(providers.Object(store)):
        yield container, store


def _recording_completer(parts: Any, seen: list[UUID]) -> Any:
    # what the default completer takes, from the parts container's own providers (each worker
    # gets its own); ``seen`` through an Object provider, so every copy shares that one list
    return providers.Singleton(
        RecordingCompleter,
        parts.store,
        interval=0.001,
        batch_size=100,
        metrics=parts.metrics,
        subscribers=providers.List(parts.subscriber),
        seen=providers.Object(seen),
    )


def test_a_part_overridden_on_the_container_is_the_one_its_workers_use(
    memory: tuple[Any, InMemoryJobStore],
) -> None:
    container, store = memory
    seen: list[UUID] = []
    parts = container.worker_parts
    with parts.completer.override(_recording_completer(parts, seen)):
        ids = [container.scheduler().enqueue(targets.add, n, n) for n in range(3)]
        worker = container.worker(worker_settings=fast_settings())
        other = container.worker(worker_settings=fast_settings())
        stats = worker.run_until_idle(timeout=60)
    assert stats.idle and stats.succeeded == 3
    assert sorted(seen) == sorted(ids)
    assert all(store.find_by_id(job_id).status is JobStatus.SUCCEEDED for job_id in ids)  # type: ignore[union-attr]
    completer = worker._parts.completer
    assert isinstance(completer, RecordingCompleter)
    # one set of parts per worker: the other worker's table is its own, its completer unbuilt
    assert other._parts.table is not worker._parts.table and other._parts.completer is None
    # the override is gone with the `with`: a new worker has the default completer again
    fresh = container.worker(worker_settings=fast_settings())
    assert type(fresh._parts.container.completer(start=False)) is CompletionBatcher


class _BrokenMaintenance(RuntimeError):
    pass


def _broken_maintenance() -> Any:
    raise _BrokenMaintenance("maintenance cannot be built")


def test_a_start_that_fails_building_a_part_leaves_no_thread_of_the_worker_running(
    memory: tuple[Any, InMemoryJobStore],
) -> None:
    container, _store = memory
    before = set(threading.enumerate())
    with container.worker_parts.maintenance.override(providers.Callable(_broken_maintenance)):
        worker = container.worker(worker_settings=fast_settings())
        with pytest.raises(_BrokenMaintenance):
            worker.start()
    # the completer's flusher and the job threads' pool had started: they are stopped again
    left = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
    assert left == []
    assert worker._parts.completer is not None  # it was built, then closed
    with pytest.raises(SchedulerStoppedError):  # its parts are spent: a new worker is needed
        worker.start()


class _Hub:
    """What a worker's ``Parts`` gives its parts (clock, callbacks), for parts built alone."""

    store_name = "InMemoryJobStore"

    def __init__(self) -> None:
        self.completer: CompletionBatcher | None = None
        self.polls = 0

    def now(self) -> datetime:
        return datetime.now(UTC)

    def gate_limit(self, key: GateKey) -> int:
        return 1

    def room_freed(self) -> None:
        pass

    def poll_now(self) -> None:
        self.polls += 1

    def note_deferred(self, item: Any) -> None:
        pass

    def current_completer(self) -> CompletionBatcher | None:
        return self.completer

    def current_workflow(self) -> None:
        return None


def _parts_alone(ratchet: Any, hub: _Hub) -> Any:
    """The parts container with its slots filled from the Ratchet container: no worker."""
    identity = ratchet.node_identity_provider().identity()
    return parts_for_worker(
        ratchet.worker_parts(),
        hub=hub,
        settings=fast_settings(),
        config=ratchet.settings(),
        store=ratchet.job_store(),
        metrics=NoOpMetricsCollector(),
        node_id=identity.node_id,
        identity=identity,
        loader=ratchet.target_loader(),
        serializer=ratchet.payload_serializer(),
        retry_policy=ratchet.retry_policy(),
        sanitizer=ratchet.error_sanitizer(),
        tuning=ratchet.execution_tuning_provider(),
        polling=ratchet.polling_strategy_provider(),
        logger_factory=ratchet.job_logger_factory(),
        bean_resolver=ratchet.bean_resolver(),
        startup=ratchet.startup_coordinator(),
        result_persistence=ratchet.result_persistence_strategy(),
        arg_resolver=ratchet.pre_execution_arg_resolver(),
        resilience=ratchet.resilience_strategy(),
        breaker_config=ratchet.circuit_breaker_config_provider(),
        codec=ratchet.payload_codec(),
        authorization=ratchet.job_authorization_policy(),
    )


@pytest.mark.parametrize(
    ("call", "status", "result"),
    [((targets.add, 2, 3), JobStatus.SUCCEEDED, 5), ((targets.fail_always, "boom"), None, None)],
    ids=["succeeds", "fails"],
)
def test_the_runner_from_the_parts_container_runs_one_job_to_its_outcome(
    memory: tuple[Any, InMemoryJobStore], call: tuple[Any, ...], status: Any, result: Any
) -> None:
    ratchet, store = memory
    hub = _Hub()
    parts = _parts_alone(ratchet, hub)
    hub.completer = parts.completer(start=False)  # no thread: written when drained
    job_id = ratchet.scheduler().enqueue(*call)
    (entity,) = store.claim_next_batch(parts.node_id(), 1)
    job = ClaimedJob(entity)
    parts.table().add(job)
    assert parts.executor().prepare(job) is None
    assert parts.runner().run_sync(job) is None  # nothing else waits for its gate
    assert store.find_by_id(job_id).status is JobStatus.RUNNING  # type: ignore[union-attr]
    hub.completer.drain()
    written = store.find_by_id(job_id)
    assert written is not None and parts.table().empty
    if status is JobStatus.SUCCEEDED:
        assert written.status is JobStatus.SUCCEEDED
        assert ratchet.scheduler().result(job_id).value == result
        assert parts.counters().snapshot().succeeded == 1
    else:  # retried later (the default policy), its error kept
        assert written.status is JobStatus.PENDING and written.scheduled_at > entity.scheduled_at
        assert written.attempt == 1 and "boom" in (written.last_error or "")


def test_an_override_naming_a_ratchet_provider_shares_it_and_gets_its_worker_s_own_parts(
    memory: tuple[Any, InMemoryJobStore],
) -> None:
    container, store = memory
    seen: list[UUID] = []
    parts = container.worker_parts
    override = providers.Singleton(
        RecordingCompleter,
        container.job_store,  # the Ratchet container's own provider: shared, not copied
        interval=0.001,
        batch_size=100,
        metrics=container.metrics_collector,  # a Singleton: copied, it would make a second one
        subscribers=providers.List(parts.subscriber),  # each worker's own subscriber
        seen=providers.Object(seen),
        start=False,
    )
    with parts.completer.override(override):
        one, two = (container.worker(worker_settings=fast_settings()) for _ in range(2))
        built = [w._parts.container.completer() for w in (one, two)]
    metrics = container.metrics_collector()
    assert all(c._store is store and c._metrics is metrics for c in built)
    assert built[0] is not built[1]
    assert [c._subscribers for c in built] == [[one._parts.subscriber], [two._parts.subscriber]]


class OwnCounters(Counters):
    """A part replaced by one that names nothing of the template."""


def test_an_override_naming_nothing_of_the_template_is_still_one_per_worker(
    memory: tuple[Any, InMemoryJobStore],
) -> None:
    # the overriding Singleton itself is a part: it was shared by every copy when it named no
    # provider of the template (two workers counted into one Counters)
    container, _ = memory
    with container.worker_parts.counters.override(providers.Singleton(OwnCounters)):
        one, two = (container.worker(worker_settings=fast_settings()) for _ in range(2))
    assert isinstance(one._parts.counters, OwnCounters)
    assert isinstance(two._parts.counters, OwnCounters)
    assert one._parts.counters is not two._parts.counters
