"""A worker's parts (see ``core.py``), taken from the parts container
(:class:`~ratchet_core.runtime.worker_parts.WorkerParts`, where they are wired) without threads
by :class:`Parts`; :meth:`Parts.open` starts the threaded ones, :meth:`Parts.close` stops them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast
from uuid import UUID

import attrs
from dependency_injector import providers

from ratchet_api.errors import ConfigurationError
from ratchet_api.spi import (
    BeanResolver,
    CircuitBreakerConfigProvider,
    ErrorSanitizer,
    ExecutionTuningProvider,
    ExecutorProvider,
    JobAuthorizationPolicy,
    JobInvocationResolver,
    JobLoggerFactory,
    MetricsCollector,
    NodeIdentityProvider,
    NodeTagAffinityProvider,
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
from ratchet_api.store.entities import JobEntity
from ratchet_api.store.protocols import (
    JobAuditStore,
    JobQueryStore,
    JobStore,
    WorkerBatchStore,
)
from ratchet_core.defaults.execution import concurrency_key
from ratchet_core.features.batches import BatchTracker
from ratchet_core.features.flow_control import FlowControl
from ratchet_core.features.workflow.driver import WorkflowDriver
from ratchet_core.payload.codec import PayloadCodec
from ratchet_core.runtime.worker_parts import parts_for_worker
from ratchet_core.worker.completion import CompletionBatcher, PendingWrite
from ratchet_core.worker.dispatch import DispatchMarks
from ratchet_core.worker.dispatcher import Dispatcher
from ratchet_core.worker.execution import ASYNC_GATE, SYNC_GATE, ClaimedJob, GateKey
from ratchet_core.worker.maintenance import Maintenance
from ratchet_core.worker.metrics_guard import GuardedMetrics
from ratchet_core.worker.poller_guard import PollerGuard
from ratchet_core.worker.producer import Producer
from ratchet_core.worker.runner import JobRunner
from ratchet_core.worker.settings import WorkerSettings
from ratchet_core.worker.stats import Counters, WorkerStats
from ratchet_core.worker.subscribers import WorkerSubscriber
from ratchet_core.worker.table import ClaimedJobs

_log = logging.getLogger("ratchet.worker")


class Parts:
    """A worker's parts and the little state they share (the store clock's offset, the jobs
    this worker deferred), from the worker's constructor arguments. The parts come from a copy
    of ``template`` (a ``WorkerParts`` container and its overrides; a new one when None) whose
    slots this fills; it stays as :attr:`container`."""

    def __init__(
        self,
        settings: WorkerSettings,
        *,
        store: JobStore,
        config: RatchetConfig,
        serializer: PayloadSerializer,
        resolver: JobInvocationResolver,
        loader: TargetLoader | None,
        retry_policy: RetryPolicy,
        sanitizer: ErrorSanitizer,
        metrics: MetricsCollector,
        executor_provider: ExecutorProvider,
        tuning: ExecutionTuningProvider,
        polling: PollingStrategyProvider,
        logger_factory: JobLoggerFactory,
        bean_resolver: BeanResolver,
        node_identity: NodeIdentityProvider,
        tag_affinity: NodeTagAffinityProvider,
        startup: StartupCoordinator,
        result_persistence: ResultPersistenceStrategy,
        arg_resolver: PreExecutionArgResolver,
        resilience: ResilienceStrategy,
        breaker_config: CircuitBreakerConfigProvider | None,
        codec: PayloadCodec | None,
        authorization: JobAuthorizationPolicy | None,
        template: Any = None,
    ) -> None:
        s = settings
        self.settings = s
        self.store = store
        self.store_name = type(store).__name__
        if loader is None:
            if not isinstance(resolver, TargetLoader):
                raise ConfigurationError(
                    "target_loader",
                    f"{type(resolver).__name__} is not a TargetLoader: pass loader= (the "
                    "container's target_loader provider does)",
                )
            loader = resolver
        self.loader: TargetLoader = loader
        # a collector that raises (against its contract) must never change a job's outcome
        self.metrics = cast(MetricsCollector, GuardedMetrics(metrics))
        self.identity = node_identity.identity()
        self.node_id = self.identity.node_id
        tag_filter = tag_affinity.tag_filter()
        self._tags = None if tag_filter.is_empty else tag_filter
        self.targets = list(s.execution_targets) or None
        self._config = config
        self._executor_provider = executor_provider
        self._tuning = tuning
        self._clock_offset = timedelta(0)
        self._deferred: dict[UUID, datetime] = {}
        self._deferred_lock = threading.Lock()
        self.query = store.capability(JobQueryStore)
        self._fast = store.capability(WorkerBatchStore)
        self.sync_limit = tuning.max_concurrency("sync", s.concurrency)
        self.async_limit = tuning.max_concurrency("async", s.concurrency)
        self.completer: CompletionBatcher | None = None
        self.workflow: WorkflowDriver | None = None
        self.maintenance: Maintenance | None = None
        # every part comes from the parts container (docs/worker.md, "Inside the worker")
        c = self.container = parts_for_worker(
            template,
            hub=self,
            settings=s,
            config=config,
            store=store,
            metrics=self.metrics,
            node_id=self.node_id,
            identity=self.identity,
            loader=loader,
            serializer=serializer,
            retry_policy=retry_policy,
            sanitizer=sanitizer,
            tuning=tuning,
            polling=polling,
            logger_factory=logger_factory,
            bean_resolver=bean_resolver,
            startup=startup,
            result_persistence=result_persistence,
            arg_resolver=arg_resolver,
            resilience=resilience,
            breaker_config=breaker_config,
            codec=codec,
            authorization=authorization,
        )
        self.audit: JobAuditStore | None = c.audit()
        retention = c.retention()
        self.maintenance_tasks = [retention] if retention is not None else []
        self.inline: bool = c.inline()
        self.counters: Counters = c.counters()
        self.guard: PollerGuard = c.guard()
        self.flow: FlowControl = c.flow()
        self.marks: DispatchMarks = c.marks()
        self.table: ClaimedJobs = c.table()
        self.batches: BatchTracker = c.batches()
        self.runner: JobRunner = c.runner()
        self.dispatcher: Dispatcher = c.dispatcher()
        self.producer: Producer = c.producer()
        self.subscriber: WorkerSubscriber = c.subscriber()

    # ------------------------------------------------------------ lifecycle

    def open(self, worker: Any, recurring: Any) -> None:
        """Start the completer, the job threads' pool, the workflow driver and maintenance.
        If one of them cannot be built or started, those already started are stopped again
        before the error propagates (no thread of this worker is left running)."""
        c = self.container
        self.refresh_clock()
        try:
            self.completer = c.completer()
            self.marks.attach(self.completer)  # noted started marks go in its batches
            if not self.inline:
                self.dispatcher.open(self._executor_provider.job_executor(self.sync_limit))
            c.worker.override(providers.Object(worker))
            c.recurring.override(providers.Object(recurring))
            self.workflow = c.workflow()
            self.maintenance = c.maintenance()
            self.maintenance.start()
        except BaseException:
            self._abandon_open()
            raise

    def _abandon_open(self) -> None:
        """Stop what a failed :meth:`open` started; a failure here is logged, the first one
        is what the caller sees."""
        steps: list[tuple[str, Callable[[], None] | None]] = [
            ("completer", self.completer.close if self.completer is not None else None),
            ("started marks", self.marks.close),
            ("workflow driver", self.workflow.close if self.workflow is not None else None),
            ("job threads", self.dispatcher.close),
            ("maintenance", self.maintenance.stop if self.maintenance is not None else None),
        ]
        for name, stop in steps:
            if stop is None:
                continue
            try:
                stop()
            except Exception:  # noqa: BLE001 - the open's own error is the one to raise
                _log.warning("stopping the %s after a failed start failed", name, exc_info=True)

    def close(self) -> None:
        """Write what is pending, then stop every thread (after the jobs were handed over)."""
        if self.completer is not None:
            self.completer.close()
        self.marks.close()
        if self.workflow is not None:
            self.workflow.close()
        self.dispatcher.close()
        if self.maintenance is not None:
            self.maintenance.stop()
            self.maintenance.deregister()

    # ------------------------------------------------------------ reads

    def snapshot(self, *, idle: bool = False) -> WorkerStats:
        return attrs.evolve(self.counters.snapshot(idle=idle), running=self.table.running)

    def quiet(self) -> bool:
        """Nothing claimed, nothing unwritten, no workflow step being settled."""
        settling = self.workflow is not None and self.workflow.pending > 0
        return self.table.empty and not settling

    def deferred_ids(self) -> set[UUID]:
        with self._deferred_lock:
            return set(self._deferred)

    def now(self) -> datetime:
        """The store's clock, approximated by the local clock plus the measured offset."""
        return datetime.now(UTC) + self._clock_offset

    def refresh_clock(self) -> None:
        try:
            self._clock_offset = self.store.server_now() - datetime.now(UTC)
        except Exception:  # noqa: BLE001 - local clock then
            _log.debug("reading the store clock failed", exc_info=True)

    # ------------------------------------------------------------ what the parts call back

    def current_completer(self) -> CompletionBatcher | None:
        return self.completer

    def current_workflow(self) -> WorkflowDriver | None:
        return self.workflow

    def accept(self, job: ClaimedJob) -> None:
        self.counters.add("claimed")
        self.dispatcher.accept(job)

    def room_freed(self) -> None:
        self.producer.wake.set()

    def poll_now(self) -> None:
        self.producer.request_poll()

    def between_polls(self) -> None:
        self.batches.sweep_every(self.settings.recovery_interval.total_seconds())

    def set_clock(self, offset: timedelta) -> None:
        self._clock_offset = offset

    def note_deferred(self, item: PendingWrite) -> None:
        if item.run_at is None:
            return
        with self._deferred_lock:
            self._deferred[item.job_id] = item.run_at
            if len(self._deferred) > 10_000:  # bounded: the oldest deferrals are long due
                for job_id in list(self._deferred)[:1000]:
                    del self._deferred[job_id]

    def claim(self, limit: int) -> list[JobEntity]:
        started = time.perf_counter()
        try:
            if self._fast is not None:
                # the jobs that start at once are marked started by the claim itself
                jobs = self._fast.claim_and_start(
                    self.node_id,
                    limit,
                    start=self.table.startable(limit),
                    execution_targets=self.targets,
                    tag_filter=self._tags,
                )
            else:
                jobs = self.store.claim_next_batch(
                    self.node_id, limit, execution_targets=self.targets, tag_filter=self._tags
                )
        except Exception:
            self._timing("failure", started)
            raise
        self._timing("success", started)
        return jobs

    def _timing(self, outcome: str, started: float) -> None:
        self.metrics.store_operation(
            self.store_name,
            "claim_next_batch",
            outcome,
            int((time.perf_counter() - started) * 1000),
        )

    def gate_limit(self, key: GateKey) -> int:
        """The concurrency of a gate: the kinds' from the tuning; an execution target label's
        ``worker.concurrency.<label>``, else the default (reported once as
        ``execution_target_fallback``)."""
        if key == SYNC_GATE:
            return self.sync_limit
        if key == ASYNC_GATE:
            return self.async_limit
        label = key.tuning_name
        limit = self._tuning.max_concurrency(label, self.settings.concurrency)
        if self._config.raw(concurrency_key(label)) is None:
            self.metrics.execution_target_fallback(label, "default")
            _log.info(
                "execution target %r has no worker.concurrency.%s; it runs with the default "
                "concurrency %d",
                label,
                label,
                limit,
            )
        return limit


__all__ = ["Parts"]
