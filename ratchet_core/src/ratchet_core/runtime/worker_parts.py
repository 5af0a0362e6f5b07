"""The container of a worker's parts: one provider per part, wired here, filled per worker.

:class:`WorkerParts` declares how the parts of ``ratchet_core.worker`` (the table of claimed
jobs, the executor, the runner, the producer, the completer...) are built from what the worker
supplies: its :class:`providers.Dependency` slots (settings, store, SPIs, node id) and ``hub``,
the worker's :class:`~ratchet_core.worker.parts.Parts`, which owns the state the parts share
(the store clock's offset, the completer once started) and the callbacks between parts.

The Ratchet container holds one as ``worker_parts`` (a :class:`providers.Container`): it is the
template of every worker it builds. Each worker works on its own copy (:func:`parts_for_worker`),
so the parts are singletons per worker, and an override made on the template reaches every
worker built afterwards::

    container.worker_parts.completer.override(
        providers.Factory(MyCompleter, store=container.worker_parts.store, ...)
    )
    worker = container.worker()  # its completer is a MyCompleter

An override referring to the template's own providers (``container.worker_parts.store``) gets
the worker's; any other provider it refers to (the Ratchet container's) is shared, not copied.
Defaults are named by import strings, like the Ratchet container's, so importing this module
imports no engine module.
"""

from __future__ import annotations

import copy
import functools
from typing import TYPE_CHECKING, Any

from dependency_injector import containers, providers

from ratchet_core.runtime.bindings import lazy

if TYPE_CHECKING:
    from ratchet_api.model import NodeIdentity
    from ratchet_api.spi import (
        BeanResolver,
        CircuitBreakerConfigProvider,
        ErrorSanitizer,
        ExecutionTuningProvider,
        JobAuthorizationPolicy,
        JobLoggerFactory,
        MetricsCollector,
        PayloadSerializer,
        PollingStrategyProvider,
        PreExecutionArgResolver,
        RatchetConfig,
        ResilienceStrategy,
        ResultPersistenceStrategy,
        RetryPolicy,
        StartupCoordinator,
        TargetLoader,
    )
    from ratchet_api.store.protocols import JobStore
    from ratchet_core.payload.codec import PayloadCodec
    from ratchet_core.worker.settings import WorkerSettings

_W = "ratchet_core.worker."
_CODEC = "ratchet_core.payload.codec.PayloadCodec"


def _flush_seconds(settings: WorkerSettings) -> float:
    return settings.flush_interval.total_seconds()


def _capacity(settings: WorkerSettings) -> int:
    return max(1, settings.concurrency + settings.prefetch)


def _backlog(settings: WorkerSettings) -> int:
    return max(settings.flush_batch_size, _capacity(settings))


def _watermark(settings: WorkerSettings) -> int:
    return max(1, min(settings.claim_batch_size, _capacity(settings)) // 2)


def _half_node_timeout(settings: WorkerSettings) -> float:
    return settings.node_timeout.total_seconds() / 2


def _twice_node_timeout(settings: WorkerSettings) -> float:
    # beyond that the job's heartbeat has stopped mattering: recovery runs it again
    return 2 * settings.node_timeout.total_seconds()


def _capability(store: Any, name: str) -> Any:
    return store.capability(lazy(f"ratchet_api.store.protocols.{name}").resolve())


def _audit(store: Any, settings: Any) -> Any:
    return _capability(store, "JobAuditStore") if settings.audit else None


def _is_set(value: Any) -> bool:
    return value is not None


def _max_pending(table: Any) -> int:
    return int(table.backlog + table.capacity)


def _inline(tuning: Any) -> bool:
    threading_mode = lazy("ratchet_api.model.ThreadingMode").resolve()
    return bool(tuning.default_threading_mode() is threading_mode.INLINE)


def _recovered(counters: Any) -> Any:
    return functools.partial(counters.add, "recovered")


def _one(value: Any) -> tuple[Any, ...]:
    return (value,)


def _codec(codec: Any) -> Any:
    return codec if codec is not None else lazy(f"{_CODEC}.disabled")()


class WorkerParts(containers.DeclarativeContainer):
    """A worker's parts. The ``Dependency`` slots are filled by the worker (``Parts``); the
    parts are ``Singleton``: one of each per worker. ``completer``, ``workflow`` and
    ``maintenance`` start threads and are built by ``Parts.open``; the others are built with
    the worker and start nothing until it starts."""

    # ---------------------------------------------------------- what the worker supplies
    hub: providers.Dependency[Any] = providers.Dependency()
    """The worker's ``Parts``: shared state and the callbacks between parts."""
    settings: providers.Dependency[WorkerSettings] = providers.Dependency()
    """The ``WorkerSettings``."""
    config: providers.Dependency[RatchetConfig] = providers.Dependency()
    store: providers.Dependency[JobStore] = providers.Dependency()
    metrics: providers.Dependency[MetricsCollector] = providers.Dependency()
    """The worker's ``MetricsCollector`` (guarded: a raising collector changes no outcome)."""
    node_id: providers.Dependency[str] = providers.Dependency(instance_of=str)
    identity: providers.Dependency[NodeIdentity] = providers.Dependency()
    loader: providers.Dependency[TargetLoader] = providers.Dependency()
    serializer: providers.Dependency[PayloadSerializer] = providers.Dependency()
    retry_policy: providers.Dependency[RetryPolicy] = providers.Dependency()
    sanitizer: providers.Dependency[ErrorSanitizer] = providers.Dependency()
    tuning: providers.Dependency[ExecutionTuningProvider] = providers.Dependency()
    polling: providers.Dependency[PollingStrategyProvider] = providers.Dependency()
    logger_factory: providers.Dependency[JobLoggerFactory] = providers.Dependency()
    bean_resolver: providers.Dependency[BeanResolver] = providers.Dependency()
    startup: providers.Dependency[StartupCoordinator] = providers.Dependency()
    result_persistence: providers.Dependency[ResultPersistenceStrategy] = providers.Dependency()
    arg_resolver: providers.Dependency[PreExecutionArgResolver] = providers.Dependency()
    resilience: providers.Dependency[ResilienceStrategy] = providers.Dependency()
    breaker_config: providers.Dependency[CircuitBreakerConfigProvider | None] = (
        providers.Dependency()
    )
    codec: providers.Dependency[PayloadCodec | None] = providers.Dependency()
    authorization: providers.Dependency[JobAuthorizationPolicy | None] = providers.Dependency(
        default=None
    )
    worker: providers.Dependency[Any] = providers.Dependency()
    """The worker itself (the workflow driver reads its collaborators); set by ``Parts.open``."""
    recurring: providers.Dependency[Any] = providers.Dependency()
    """The recurring jobs' sweeper, set by ``Parts.open``."""

    # ---------------------------------------------------------- values derived once
    payload_codec = providers.Singleton(_codec, codec)
    audit = providers.Singleton(_audit, store, settings)
    inline = providers.Singleton(_inline, tuning)

    # ---------------------------------------------------------- parts without threads
    counters = providers.Singleton(lazy(f"{_W}stats.Counters"))
    guard = providers.Singleton(
        lazy(f"{_W}poller_guard.PollerGuard"), node_id, breaker_config, metrics
    )
    flow = providers.Singleton(
        lazy("ratchet_core.features.flow_control.FlowControl"), store, config, metrics
    )
    marks = providers.Singleton(
        lazy(f"{_W}dispatch.DispatchMarks"),
        store,
        delay=providers.Callable(_flush_seconds, settings),
    )
    table = providers.Singleton(
        lazy(f"{_W}table.ClaimedJobs"),
        concurrency=settings.provided.concurrency,
        prefetch=settings.provided.prefetch,
        backlog=providers.Callable(_backlog, settings),
        watermark=providers.Callable(_watermark, settings),
        gate_limit=hub.provided.gate_limit,
        on_free=hub.provided.room_freed,
    )
    batches = providers.Singleton(
        lazy("ratchet_core.features.batches.BatchTracker"),
        store,
        on_released=hub.provided.poll_now,
    )
    executor = providers.Singleton(
        lazy(f"{_W}executor.JobExecutor"),
        loader=loader,
        arg_resolver=arg_resolver,
        bean_resolver=bean_resolver,
        resilience=resilience,
        logger_factory=logger_factory,
        serializer=serializer,
        sanitizer=sanitizer,
        extension=providers.Callable(_capability, store, "JobExtensionStore"),
        node_id=node_id,
        codec=payload_codec,
        authorization=providers.Callable(
            lazy("ratchet_core.defaults.authorization.effective_policy"), authorization
        ),
        # opens sealed trace contexts
        tracing=providers.Callable(
            lazy("ratchet_core.observability.tracing.tracing_from_config"), config, payload_codec
        ),
    )
    admission = providers.Singleton(
        lazy(f"{_W}admission.Admission"),
        flow=flow,
        resilience=resilience,
        marks=marks,
        mark_lease=providers.Callable(_half_node_timeout, settings),
        now=hub.provided.now,
        metrics=metrics,
    )
    runner = providers.Singleton(
        lazy(f"{_W}runner.JobRunner"),
        table=table,
        executor=executor,
        admission=admission,
        completer=hub.provided.current_completer,
        flow=flow,
        marks=marks,
        retry_policy=retry_policy,
        sanitizer=sanitizer,
        results=result_persistence,
        codec=payload_codec,
        metrics=metrics,
        node_id=node_id,
        audit=providers.Callable(_is_set, audit),
        now=hub.provided.now,
    )
    dispatcher = providers.Singleton(
        lazy(f"{_W}dispatcher.Dispatcher"),
        table=table,
        executor=executor,
        runner=runner,
        inline=inline,
        node_id=node_id,
    )
    producer = providers.Singleton(
        lazy(f"{_W}producer.Producer"),
        table,
        hub.provided.claim,
        guard,
        settings.provided.claim_batch_size,
        accept=hub.provided.accept,
        polling=polling,
        settings=settings,
        metrics=metrics,
        node_id=node_id,
        between_polls=hub.provided.between_polls,
    )
    subscriber = providers.Singleton(
        lazy(f"{_W}subscribers.WorkerSubscriber"),
        table=table,
        counters=counters,
        batches=batches,
        workflow=hub.provided.current_workflow,
        node_id=node_id,
        on_deferred=hub.provided.note_deferred,
    )
    retention = providers.Singleton(
        lazy("ratchet_core.features.retention.RetentionTask.from_config"), store, config, startup
    )

    # ---------------------------------------------------------- parts with threads (at start)
    completer = providers.Singleton(
        lazy(f"{_W}completion.CompletionBatcher"),
        store,
        interval=providers.Callable(_flush_seconds, settings),
        batch_size=settings.provided.flush_batch_size,
        metrics=metrics,
        audit=audit,
        store_name=hub.provided.store_name,
        subscribers=providers.List(subscriber),
        max_pending=providers.Callable(_max_pending, table),
        give_up_after=providers.Callable(_twice_node_timeout, settings),
    )
    workflow = providers.Singleton(
        lazy("ratchet_core.features.workflow.driver.create_driver"),
        worker,
        producer.provided.request_poll,
    )
    maintenance = providers.Singleton(
        lazy(f"{_W}maintenance.Maintenance"),
        store,
        identity,
        startup,
        heartbeat_interval=settings.provided.heartbeat_interval,
        node_timeout=settings.provided.node_timeout,
        recovery_interval=settings.provided.recovery_interval,
        owned_ids=table.provided.owned_ids,
        on_recovered=providers.Callable(_recovered, counters),
        on_clock=hub.provided.set_clock,
        recurring=recurring,
        sweeps=providers.Callable(_one, workflow.provided.sweep),
        tasks=hub.provided.maintenance_tasks,
    )


def parts_for_worker(template: Any, **supplied: Any) -> Any:
    """A copy of ``template`` (a :class:`WorkerParts` instance, with the overrides made on it;
    a new ``WorkerParts`` when None) for one worker, its slots filled with ``supplied``. A
    provider is copied when it overrides or leads to one of the template's own providers (so an
    override is this worker's own part and gets this worker's parts), shared otherwise (a
    provider of the Ratchet container that an override refers to stays one)."""
    if template is None:
        return _filled(WorkerParts(), supplied)
    own = list(template.providers.values())
    memo: dict[int, Any] = {}
    holder = template.parent  # the Ratchet container's provider holding the template, and up
    while holder is not None:
        memo[id(holder)] = holder
        holder = getattr(holder, "parent", None)
    if any(p.overridden for p in own):
        reachable = list(providers.traverse(*own))
        # an overriding provider is a part too: one per worker, whatever it names
        copied = {id(p) for p in own} | {id(o) for p in own for o in p.overridden}
        changed = True
        while changed:
            changed = False
            for provider in reachable:
                if id(provider) not in copied and any(id(r) in copied for r in provider.related):
                    copied.add(id(provider))
                    changed = True
        memo.update((id(p), p) for p in reachable if id(p) not in copied)
    return _filled(copy.deepcopy(template, memo), supplied)


def _filled(parts: Any, supplied: dict[str, Any]) -> Any:
    for name, value in supplied.items():
        getattr(parts, name).override(providers.Object(value))
    return parts


__all__ = ["WorkerParts", "parts_for_worker"]
