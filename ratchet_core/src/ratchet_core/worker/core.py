"""The worker: claims due jobs and runs them.

The parts (see ``docs/worker.md``, "Inside the worker"):

* the **producer** (``producer.py``) owns the one count of busy slots and claims at most the
  free ones, on the poller thread, under the poller's circuit breaker (``poller_guard.py``);
  it is woken early by local enqueues (``SchedulerService.add_local_wakeup_listener``) and by
  other nodes (``ClusterCoordinator``) and otherwise waits the ``PollingStrategyProvider``'s
  adaptive delay;
* the **executor** (``executor.py``) prepares each claimed job (decode, re-check through the
  ``TargetLoader``: a refused job goes to the dead letter, a target that cannot be imported
  here is a failed attempt) and runs it with one call plan: ``def`` targets on the
  ``ExecutorProvider``'s (daemon) threads, ``async def`` targets on one event loop thread,
  concurrency limited per execution type (``ExecutionTuningProvider``);
* the **completer** (``completion.py``) writes outcomes off the job threads, each fenced by its
  claim sequence: successes in batches, retries and dead letters one by one;
* **maintenance** (``maintenance.py``): the heartbeat thread and the recovery thread.

This class wires them together and keeps the per-job bookkeeping. Entry points for features:
``_begin`` (job about to run), ``_finish`` (job finished, with its ``Outcome``),
``_on_flushed`` / ``_on_failure_written`` (outcome written).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any, NoReturn, cast
from uuid import UUID

import attrs

from ratchet_api.errors import (
    CircuitBreakerOpenError,
    ConfigurationError,
    SchedulerStoppedError,
    StoreError,
    TargetNotImportableError,
)
from ratchet_api.model import (
    BackoffPolicy,
    JobStatus,
    JobWakeupHint,
    ThreadingMode,
)
from ratchet_api.spi import (
    BeanResolver,
    CircuitBreakerConfigProvider,
    ClassPolicy,
    ClusterCoordinator,
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
    SchedulerLifecycleHook,
    StartupCoordinator,
    TargetLoader,
)
from ratchet_api.store.entities import Completion, ExecutionRecord, JobEntity, JobQuery
from ratchet_api.store.protocols import (
    JobAuditStore,
    JobExtensionStore,
    JobQueryStore,
    JobStore,
)
from ratchet_core.authorization import effective_policy
from ratchet_core.batches import BatchTracker
from ratchet_core.codec import PayloadCodec
from ratchet_core.defaults.execution import concurrency_key
from ratchet_core.flow_control import FlowControl
from ratchet_core.logs import flush_queued_logging, one_line
from ratchet_core.payload import decode_backoff
from ratchet_core.recurring.runner import start_recurring
from ratchet_core.retention import RetentionTask
from ratchet_core.retry import decide_retry
from ratchet_core.stores import require_schema
from ratchet_core.tracing import tracing_from_config
from ratchet_core.worker.completion import CompletionBatcher, PendingCompletion, PendingFailure
from ratchet_core.worker.dispatch import DispatchMarks
from ratchet_core.worker.execution import (
    FINISHED,
    QUEUED,
    RELEASED,
    RUNNING,
    ClaimedJob,
)
from ratchet_core.worker.executor import (
    REFUSED,
    JobExecutor,
    LazyJobLogger,
    Outcome,
)
from ratchet_core.worker.maintenance import Maintenance
from ratchet_core.worker.poller_guard import PollerGuard
from ratchet_core.worker.producer import Producer, SlotCount
from ratchet_core.worker.settings import WorkerSettings
from ratchet_core.worker.stats import Counters, WorkerStats
from ratchet_core.worker.store_retry import retry_transient, transient_predicate
from ratchet_core.worker.tracebacks import sanitized_traceback
from ratchet_core.workflow.driver import WorkflowDriver, create_driver

_log = logging.getLogger("ratchet.worker")


@attrs.define
class _Gate:
    """Concurrency of one execution type."""

    limit: int
    running: int = 0
    waiting: deque[ClaimedJob] = attrs.field(factory=deque)


class Worker:
    """Claims and runs jobs (see the module docstring). Built by the container's ``worker``
    provider (a Factory: each call makes a new worker with its own threads).

    ``start()`` returns at once; ``stop(timeout)`` stops gracefully; ``run_forever()`` runs until
    SIGTERM/SIGINT; ``run_until_idle(timeout)`` runs until no due job is left (tests, demos).
    Thread safe.
    """

    def __init__(
        self,
        *,
        store: JobStore,
        settings: RatchetConfig,
        serializer: PayloadSerializer,
        resolver: JobInvocationResolver,
        loader: TargetLoader | None = None,
        class_policy: ClassPolicy,
        retry_policy: RetryPolicy,
        error_sanitizer: ErrorSanitizer,
        metrics: MetricsCollector,
        executor_provider: ExecutorProvider,
        tuning: ExecutionTuningProvider,
        polling: PollingStrategyProvider,
        logger_factory: JobLoggerFactory,
        bean_resolver: BeanResolver,
        node_identity: NodeIdentityProvider,
        tag_affinity: NodeTagAffinityProvider,
        cluster: ClusterCoordinator,
        startup: StartupCoordinator,
        lifecycle_hooks: Sequence[SchedulerLifecycleHook] = (),
        result_persistence: ResultPersistenceStrategy,
        arg_resolver: PreExecutionArgResolver,
        resilience: ResilienceStrategy,
        scheduler: Any = None,
        worker_settings: WorkerSettings | None = None,
        breaker_config: CircuitBreakerConfigProvider | None = None,
        codec: PayloadCodec | None = None,
        authorization: JobAuthorizationPolicy | None = None,
    ) -> None:
        if loader is None:
            if not isinstance(resolver, TargetLoader):
                raise ConfigurationError(
                    "target_loader",
                    f"{type(resolver).__name__} is not a TargetLoader: pass loader= (the "
                    "container's target_loader provider does)",
                )
            loader = resolver
        self._store = store
        self._serializer = serializer
        self._resolver: TargetLoader = loader
        self._class_policy = class_policy
        self._retry_policy = retry_policy
        self._sanitizer = error_sanitizer
        # a collector that raises (against its contract) must never change a job's outcome
        self._metrics = cast(MetricsCollector, _GuardedMetrics(metrics))
        self._executor_provider = executor_provider
        self._tuning = tuning
        self._polling = polling
        self._logger_factory = logger_factory
        self._beans = bean_resolver
        self._identity = node_identity.identity()
        self.node_id = self._identity.node_id
        self._tag_filter = tag_affinity.tag_filter()
        self._cluster = cluster
        self._startup = startup
        self._hooks = list(lifecycle_hooks)
        self._results = result_persistence
        self._arg_resolver = arg_resolver
        self._resilience = resilience
        self._scheduler = scheduler
        self._config = settings
        self._guard = PollerGuard(self.node_id, breaker_config, self._metrics)
        self._codec = codec if codec is not None else PayloadCodec.disabled()
        self._authorization = effective_policy(authorization)
        self.settings = worker_settings or WorkerSettings.from_config(settings)
        retention = RetentionTask.from_config(store, settings, startup)
        self._tracing = tracing_from_config(settings)
        self._maintenance_tasks = [retention] if retention is not None else []
        s = self.settings
        # started marks (issue 17), written or noted in _begin
        self._dispatch = DispatchMarks(store, delay=s.flush_interval.total_seconds())
        self._mark_lease = s.node_timeout.total_seconds() / 2

        self._audit = store.capability(JobAuditStore) if s.audit else None
        self._extension = store.capability(JobExtensionStore)
        self._jobs = JobExecutor(
            loader=self._resolver,
            arg_resolver=arg_resolver,
            bean_resolver=bean_resolver,
            resilience=resilience,
            logger_factory=logger_factory,
            serializer=serializer,
            sanitizer=error_sanitizer,
            extension=self._extension,
            node_id=self.node_id,
            codec=self._codec,
            authorization=self._authorization,
            tracing=self._tracing,
            begin=self._begin,
            finish=self._finish,
        )
        self._query = store.capability(JobQueryStore)
        self._store_name = type(store).__name__
        self._is_transient = transient_predicate(store)

        self._inline = tuning.default_threading_mode() is ThreadingMode.INLINE
        self._sync_limit = tuning.max_concurrency("sync", s.concurrency)
        self._async_limit = tuning.max_concurrency("async", s.concurrency)
        capacity = max(1, s.concurrency + s.prefetch)
        self._wake = threading.Event()
        self._slots = SlotCount(
            capacity,
            busy_at=s.concurrency,
            watermark=max(1, min(s.claim_batch_size, capacity) // 2),
            on_free=self._wake.set,
        )
        self._producer = Producer(self._slots, self._claim, self._guard, s.claim_batch_size)
        self._targets = list(s.execution_targets) or None
        self._tags = None if self._tag_filter.is_empty else self._tag_filter

        self._lock = threading.Lock()
        self._owned: dict[UUID, ClaimedJob] = {}
        self._gates: dict[str, _Gate] = {
            "sync": _Gate(self._sync_limit),
            "async": _Gate(self._async_limit),
        }
        self._counters = Counters()
        self._clock_offset = timedelta(0)

        self._wakeup_requested = False
        self._empty_polls = 0

        self._state = "new"
        self._stopping = False
        self._stop_requested = threading.Event()
        self._poller: threading.Thread | None = None
        self._executor: Executor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._batcher: CompletionBatcher | None = None
        self._maintenance: Maintenance | None = None
        self._workflow: WorkflowDriver | None = None
        self._listeners_registered = False
        self._batches = BatchTracker(store, on_released=self._request_poll)
        self._flow = FlowControl(store, settings, self._metrics)

    # ================================================================ lifecycle

    @property
    def stats(self) -> WorkerStats:
        """Counters since creation (``running`` is the number of jobs executing now)."""
        return self._counters.snapshot()

    @property
    def running(self) -> bool:
        return self._state == "running"

    def attach_scheduler(self, scheduler: Any) -> None:
        """Be woken at once by enqueues made through ``scheduler`` in this process (it must
        offer ``add_local_wakeup_listener``)."""
        self._scheduler = scheduler
        if self._state == "running":
            self._register_local_listener()

    def start(self) -> None:
        """Check the store's schema, run lifecycle hooks' ``before_start`` (one raising aborts
        the start), register the node, start the threads, then ``after_start``. Raises
        ``StoreError`` (telling to run ``ratchet db upgrade``) when the store's schema is
        missing or older than this version's, ``SchedulerStoppedError`` after ``stop``."""
        with self._lock:
            if self._state == "running":
                return
            if self._state == "stopped":
                raise SchedulerStoppedError("this worker was stopped; create a new one")
            self._state = "starting"
        try:
            require_schema(self._store)
            recurring = start_recurring(  # declares @recurring/configured definitions
                self._store,
                self._config,
                self._scheduler,
                on_fired=self._wake.set,
                metrics=self._metrics,
            )
            for hook in self._hooks:
                hook.before_start()
        except BaseException:
            with self._lock:
                self._state = "new"
            raise
        s = self.settings
        self._refresh_clock()
        self._batcher = CompletionBatcher(
            self._store,
            interval=s.flush_interval.total_seconds(),
            batch_size=s.flush_batch_size,
            on_flushed=self._on_flushed,
            metrics=self._metrics,
            audit=self._audit,
            store_name=self._store_name,
            on_failure=self._on_failure_written,
        )
        if not self._inline:
            self._executor = self._executor_provider.job_executor(self._sync_limit)
        self._workflow = create_driver(self, self._request_poll)
        self._maintenance = Maintenance(
            self._store,
            self._identity,
            self._startup,
            heartbeat_interval=s.heartbeat_interval,
            node_timeout=s.node_timeout,
            recovery_interval=s.recovery_interval,
            owned_ids=self._owned_ids,
            on_recovered=lambda n: self._counters.add("recovered", n),
            on_clock=self._set_clock,
            recurring=recurring,
            sweeps=(self._workflow.sweep,),
            tasks=self._maintenance_tasks,
        )
        self._maintenance.start()
        if not self._listeners_registered:
            self._listeners_registered = True
            self._cluster.register_wakeup_listener(self._on_cluster_wakeup)
            self._register_local_listener()
        with self._lock:
            self._state = "running"
            self._stopping = False
        self._poller = threading.Thread(target=self._poll_loop, name="ratchet-poller", daemon=True)
        self._poller.start()
        _log.info(
            "worker %s started: concurrency sync=%d async=%d, prefetch %d, store %s",
            self.node_id,
            self._sync_limit,
            self._async_limit,
            s.prefetch,
            self._store_name,
        )
        self._run_hooks("after_start")

    def stop(self, timeout: float | None = None) -> WorkerStats:
        """Stop gracefully: stop claiming, give back claimed jobs that have not started
        (``release_claim``), let running jobs finish for up to ``timeout`` seconds (default
        ``worker.shutdown_timeout``), put jobs still running afterwards back to pending
        (abandoned), write pending completions, stop heartbeating, delete this node's row (a
        clean stop is not a death) and close the ``ClusterCoordinator``. Idempotent; returns
        the final stats."""
        with self._lock:
            if self._state != "running":
                return self._counters.snapshot()
            self._state = "stopping"
            self._stopping = True
        self._run_hooks("before_stop")
        limit = self.settings.shutdown_timeout.total_seconds() if timeout is None else timeout
        self._wake.set()
        if self._poller is not None and self._poller is not threading.current_thread():
            self._poller.join(timeout=max(limit, 5.0) + 30)
        self._release_queued()
        self._slots.wait_until_free(limit)
        with self._lock:
            leftovers = [j for j in self._owned.values() if j.state == RUNNING]
        for job in leftovers:
            self._requeue_interrupted(job)
        # permits are renewed until no job of this worker runs any more
        self._flow.close()
        if leftovers:
            self._counters.add("abandoned", len(leftovers))
            _log.error(
                "worker %s: %d jobs still running after the shutdown timeout (%gs) were "
                "abandoned and put back to pending: %s",
                self.node_id,
                len(leftovers),
                limit,
                ", ".join(f"{j.entity.id} ({j.entity.target})" for j in leftovers),
            )
        if self._batcher is not None:
            self._batcher.close()
        self._dispatch.close()
        if self._workflow is not None:
            self._workflow.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        self._stop_loop()
        if self._maintenance is not None:
            self._maintenance.stop()
            self._maintenance.deregister()
        try:
            self._cluster.close()
        except Exception:  # noqa: BLE001 - best effort on the way out
            _log.warning("closing the cluster coordinator failed", exc_info=True)
        remove = getattr(self._scheduler, "remove_local_wakeup_listener", None)
        if callable(remove):
            remove(self._on_local_wakeup)
        with self._lock:
            self._state = "stopped"
        self._stop_requested.set()
        stats = self._counters.snapshot()
        _log.info(
            "worker %s stopped: %d succeeded, %d failed, %d retried, %d released",
            self.node_id,
            stats.succeeded,
            stats.failed,
            stats.retried,
            stats.released,
        )
        self._run_hooks("after_stop")
        return stats

    def request_stop(self) -> None:
        """Ask ``run_forever`` to stop (thread and signal safe)."""
        self._stop_requested.set()

    def run_forever(self, *, install_signal_handlers: bool = True) -> WorkerStats:
        """Start and block until SIGTERM/SIGINT (or ``request_stop``), then stop gracefully.
        Signal handlers are installed only when called from the main thread; the previous
        handlers are restored afterwards. A second SIGTERM/SIGINT while stopping ends the
        process at once (``os._exit(128 + signal number)``)."""
        previous: dict[int, Any] = {}
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            received: list[int] = []

            def handler(signum: int, frame: FrameType | None) -> None:
                name = signal.Signals(signum).name
                if received:
                    _exit_now(signum, name)
                received.append(signum)
                _log.info(
                    "signal %s received: stopping gracefully (send it again to exit at once)", name
                )
                self._stop_requested.set()

            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, handler)
        try:
            self.start()
            while not self._stop_requested.wait(0.5):
                pass
        finally:
            stats = self.stop()
            for signum, old in previous.items():
                signal.signal(signum, old)
        return stats

    def run_until_idle(self, timeout: float = 30.0) -> WorkerStats:
        """Run until no due job is left and nothing is in flight, then stop (if this call
        started the worker). Retries that come due within ``timeout`` are waited for when the
        store can be queried (``JobQueryStore``). Returns the stats; ``stats.idle`` is False
        when ``timeout`` passed first."""
        started_here = self._state != "running"
        if started_here:
            self.start()
        deadline = time.monotonic() + timeout
        idle = False
        try:
            while time.monotonic() < deadline:
                if self._is_idle(deadline):
                    idle = True
                    break
        finally:
            if started_here:
                self.stop()
        return self._counters.snapshot(idle=idle)

    def _is_idle(self, deadline: float) -> bool:
        with self._lock:
            busy = bool(self._owned) or self._slots.in_use > 0 or self._settling()
            polls = self._empty_polls
        if busy:
            time.sleep(0.005)
            return False
        # Nothing in flight: idle once a poll that started after this moment finds nothing.
        self._request_poll()
        while time.monotonic() < deadline:
            with self._lock:
                if self._owned or self._slots.in_use or self._settling():
                    return False
                if self._empty_polls >= polls + 2:
                    break
            time.sleep(0.002)
        else:
            return False
        due_soon = self._next_retry_due(deadline)
        if due_soon is not None:
            time.sleep(min(max(0.0, due_soon), 0.05))
            return False
        return True

    def _next_retry_due(self, deadline: float) -> float | None:
        """Seconds until the earliest pending retry due before ``deadline``, or None."""
        if self._query is None:
            return None
        try:
            pending = self._query.search_jobs(
                JobQuery(statuses=frozenset({JobStatus.PENDING}), limit=1000)
            )
        except Exception:  # noqa: BLE001 - idleness is then judged by claims only
            return None
        now = self._now()
        horizon = now + timedelta(seconds=max(0.0, deadline - time.monotonic()))
        due = [j.scheduled_at for j in pending if j.attempt > 0 and j.scheduled_at <= horizon]
        if not due:
            return None
        return max(0.0, (min(due) - now).total_seconds())

    def _run_hooks(self, name: str) -> None:
        for hook in self._hooks:
            try:
                getattr(hook, name)()
            except Exception:  # noqa: BLE001 - only before_start may abort
                _log.exception("lifecycle hook %r %s failed", hook, name)

    # ================================================================ wake-ups

    def _register_local_listener(self) -> None:
        add = getattr(self._scheduler, "add_local_wakeup_listener", None)
        if callable(add):
            add(self._on_local_wakeup)

    def _on_local_wakeup(self) -> None:
        # The scheduler records the local_wakeup metric (once per enqueue, not per worker).
        self._request_poll()

    def _on_cluster_wakeup(self, hint: JobWakeupHint) -> None:
        target = hint.execution_target
        if target is not None and self._targets is not None and target not in self._targets:
            return
        self._metrics.cluster_wakeup_received(hint.source.node_id, target or "")
        self._request_poll()

    def _woken(self) -> bool:
        return self._wakeup_requested

    def _request_poll(self) -> None:
        self._wakeup_requested = True
        self._wake.set()

    # ================================================================ poller

    def _poll_loop(self) -> None:
        # An unexpected error (a pluggable part's bug) must not end claiming silently while
        # the worker still reports itself running: log it and poll again after a pause.
        while not self._stopping:
            try:
                self._poll()
            except Exception:  # noqa: BLE001 - the poller must survive anything
                _log.exception("worker %s: the poller failed; polling again in 1s", self.node_id)
                if self._wake.wait(1.0):
                    self._wake.clear()

    def _poll(self) -> None:
        strategy = self._polling.create(self.settings.polling)
        max_wait = self.settings.polling.max_interval.total_seconds()
        while not self._stopping:
            open_for = self._guard.open_for()
            if open_for:
                self._wake.wait(min(open_for, max_wait * 5))
                self._wake.clear()
                continue
            self._wakeup_requested = False
            sent = time.monotonic()  # before the claim: the store stamps it later
            try:
                claim = self._producer.poll_once()
            except CircuitBreakerOpenError:
                continue
            except Exception as exc:  # noqa: BLE001 - the poller must survive store outages
                self._metrics.claim_transient_failure(type(exc).__name__)
                pause = strategy.next_delay(0, self._slots.capacity).total_seconds()
                _log.warning("claiming jobs failed (%s); retrying in %.1fs", one_line(exc), pause)
                self._wake.wait(pause)
                self._wake.clear()
                continue
            if claim is None:  # no free slot: a finishing job wakes us
                self._wake.wait(max_wait)
                self._wake.clear()
                continue
            claimed, want = claim.jobs, claim.asked
            if claimed:
                self._metrics.jobs_claimed(self.node_id, len(claimed))
                for job in [ClaimedJob(entity, sent) for entity in claimed]:
                    # one job's failure must not strand the rest of the batch (claimed by
                    # this node but unknown to it until stale recovery)
                    try:
                        self._accept(job)
                    except Exception:  # noqa: BLE001 - a pluggable part's bug
                        _log.exception(
                            "worker %s: accepting job %s failed; releasing its claim",
                            self.node_id,
                            job.entity.id,
                        )
                        self._abandon(job)
                if len(claimed) == want:
                    continue  # the queue probably holds more: claim again at once
            else:
                with self._lock:
                    self._empty_polls += 1
            self._batches.sweep_every(self.settings.recovery_interval.total_seconds())
            delay = strategy.next_delay(len(claimed), want).total_seconds()
            if self._woken():
                strategy.reset()
                continue
            if self._wake.wait(delay):
                self._wake.clear()
                if self._woken():
                    strategy.reset()

    def _claim(self, limit: int) -> list[JobEntity]:
        started = time.perf_counter()
        try:
            jobs = self._store.claim_next_batch(
                self.node_id, limit, execution_targets=self._targets, tag_filter=self._tags
            )
        except Exception:
            self._store_timing("claim_next_batch", "failure", started)
            raise
        self._store_timing("claim_next_batch", "success", started)
        return jobs

    def _store_timing(self, operation: str, outcome: str, started: float) -> None:
        self._metrics.store_operation(
            self._store_name, operation, outcome, int((time.perf_counter() - started) * 1000)
        )

    def _accept(self, job: ClaimedJob) -> None:
        entity = job.entity
        with self._lock:
            self._owned[entity.id] = job
        self._counters.add("claimed")
        refusal = self._jobs.prepare(job)
        if isinstance(refusal, TargetNotImportableError):
            self._fail_unstarted(job, refusal)
            return
        if refusal is not None:
            self._dead_letter_unstarted(job, refusal)
            return
        if self._inline and not job.is_async:
            self._jobs.run_sync(job)
            return
        with self._lock:
            gate = self._gates.get(job.gate)
            if gate is None:
                gate = self._gates[job.gate] = self._new_gate(job.gate)
            stopping = self._stopping
            if not stopping:
                if gate.running >= gate.limit:
                    gate.waiting.append(job)
                    return
                gate.running += 1
        if stopping:  # claimed as the worker stops: it would never start, give it back
            self._abandon(job)
            return
        try:
            self._submit(job)
        except BaseException:
            with self._lock:
                if job.state == QUEUED:
                    gate.running -= 1
            raise

    def _new_gate(self, label: str) -> _Gate:
        """The gate of an execution target label: ``worker.concurrency.<label>``, else the
        default concurrency (reported once as ``execution_target_fallback``)."""
        limit = self._tuning.max_concurrency(label, self.settings.concurrency)
        if self._config.raw(concurrency_key(label)) is None:
            self._metrics.execution_target_fallback(label, "default")
            _log.info(
                "execution target %r has no worker.concurrency.%s; it runs with the default "
                "concurrency %d",
                label,
                label,
                limit,
            )
        return _Gate(limit)

    def _abandon(self, job: ClaimedJob) -> None:
        """Give back the claim of a job whose acceptance failed before it started: fenced
        ``release_claim`` (the attempt is not counted), so another poll runs it."""
        entity = job.entity
        with self._lock:
            if job.state != QUEUED and job.started_at is not None:
                return  # it started: its own outcome path accounts for it
            if job.state == FINISHED:
                return  # refused or failed before starting: already written
            job.state = RELEASED
            for gate in self._gates.values():
                if job in gate.waiting:
                    gate.waiting.remove(job)
            self._disown(job)
        self._give_back(job)
        applied = self._write(
            "release_claim",
            lambda: self._store.release_claim(entity.id, entity.claim_seq),
            entity.id,
        )
        if applied:
            self._counters.add("released")

    def _submit(self, job: ClaimedJob) -> None:
        if job.is_async:
            loop = self._event_loop()
            asyncio.run_coroutine_threadsafe(self._jobs.run_async(job), loop)
        elif self._executor is None:
            self._jobs.run_sync(job)
        else:
            try:
                self._executor.submit(self._jobs.run_sync, job)
            except RuntimeError:  # executor shut down: the job is released by stop()
                _log.debug("executor closed; job %s stays queued for release", job.entity.id)

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="ratchet-async-jobs", daemon=True
                )
                thread.start()
                self._loop, self._loop_thread = loop, thread
            return self._loop

    def _stop_loop(self) -> None:
        loop, thread = self._loop, self._loop_thread
        if loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=5)
        if not loop.is_running():
            loop.close()

    # ================================================================ running a job

    def _begin(self, job: ClaimedJob) -> bool:
        with self._lock:
            if job.state != QUEUED:
                return False
            job.state = RUNNING
        job.started_at = datetime.now(UTC)
        job.started_mono = time.perf_counter()
        self._counters.add("running")
        if self._circuit_open(job):
            return False
        delay = self._flow.admit(job.entity)  # resource permit, rate limit
        if delay is not None:
            self._gate_rejected(job, delay)
            return False
        entity = job.entity
        # Started mark (issue 17, store side): recovery charges no attempt to a claim never
        # marked. The store can take a claim back only once the job's heartbeat is
        # node_timeout old (reset_orphan_jobs, the stale-job sweep); the claim stamped it, so
        # within half of that since the claim was sent, nothing can have superseded it and
        # the mark is noted (written shortly after the start, skipped if the job finished
        # first). Later, or for a job given back without charge before (claim_seq > attempt:
        # it may have killed its worker before its mark was written), the mark is checked
        # before the job runs and a claim the store reports superseded is not run.
        # Both clocks are asked: the monotonic one keeps running through SIGSTOP, the store's
        # (local wall clock + measured offset) through a host suspend.
        if (
            entity.claim_seq == entity.attempt
            and time.monotonic() - job.claimed_mono < self._mark_lease
            and (
                entity.heartbeat_at is None
                or (self._now() - entity.heartbeat_at).total_seconds() < self._mark_lease
            )
        ):
            self._dispatch.note(entity.id, entity.claim_seq)
        else:
            current = self._dispatch.mark(entity.id, entity.claim_seq)
            if current is False:
                _log.warning(
                    "job %s was recovered or cancelled before it started; not run", entity.id
                )
                self._flow.release(entity)  # the permit taken just above
                with self._lock:
                    self._disown(job)
                self._release_slot(job)
                return False
            if current is None:  # the store could not answer: the job runs, its mark retried
                self._dispatch.note(entity.id, entity.claim_seq)
        self._metrics.job_started(entity.id, entity.job_type, entity.priority)
        return True

    def _gate_rejected(self, job: ClaimedJob, delay: timedelta) -> None:
        """Not admitted by flow control: give the claim back, due after ``delay``, without
        counting the attempt."""
        entity = job.entity
        job.state = FINISHED
        applied = self._write(
            "defer_claim", lambda: self._flow.defer(entity, self._now() + delay), entity.id
        )
        if applied:
            self._counters.add("released")
        with self._lock:
            self._disown(job)
        self._release_slot(job)

    def _circuit_open(self, job: ClaimedJob) -> bool:
        """Advisory pre-check of the target's circuit breaker: when the circuit rejects calls
        now, the job is given back without counting the attempt, due again after the
        strategy's ``get_retry_delay`` (the breaker re-checks the call anyway)."""
        breaker = job.loaded.circuit_breaker
        if breaker is None:
            return False
        try:
            available = self._resilience.is_service_available(breaker[0])
        except Exception:  # noqa: BLE001 - advisory: the call itself is still guarded
            _log.warning("is_service_available(%r) failed", breaker[0], exc_info=True)
            return False
        if available:
            return False
        self._defer_for_circuit(job, breaker[0])
        return True

    def _defer_for_circuit(self, job: ClaimedJob, service: str) -> None:
        """Give the claim back (fenced ``release_claim`` with ``run_at``: the attempt is not
        counted) until the circuit of ``service`` may let calls through."""
        entity = job.entity
        try:
            delay = self._resilience.get_retry_delay(service)
        except Exception:  # noqa: BLE001 - a pluggable part's bug: wait a second
            _log.warning("get_retry_delay(%r) failed", service, exc_info=True)
            delay = timedelta(seconds=1)
        job.state = FINISHED
        applied = self._write(
            "release_claim",
            lambda: self._store.release_claim(
                entity.id, entity.claim_seq, run_at=self._now() + delay
            ),
            entity.id,
        )
        if applied:
            self._counters.add("deferred")
            _log.info(
                "job %s (%s): circuit %r is open; due again in %.1fs (attempt not counted)",
                entity.id,
                entity.target,
                service,
                delay.total_seconds(),
            )
        elif applied is False:
            self._counters.add("stale")
        with self._lock:
            self._disown(job)
        self._release_slot(job)

    # ================================================================ outcomes

    def _finish(self, outcome: Outcome) -> None:
        """The executor's "job finished" hook: write the outcome of one call."""
        if outcome.error is None:
            self._finish_success(outcome.job, outcome.result, outcome.logger)
        else:
            self._finish_failure(outcome.job, outcome.error, outcome.logger)

    def _finish_success(self, job: ClaimedJob, result: Any, lazy: LazyJobLogger | None) -> None:
        entity = job.entity
        self._flow.release(entity)
        try:
            serialized = self._results.serialize(entity.id, result)
            stored_result = self._codec.seal_result(entity, serialized.json)
        except Exception as exc:  # noqa: BLE001 - an unstorable result fails the attempt
            self._finish_failure(job, exc, lazy)
            return
        if lazy is not None:
            lazy.finish()
        elapsed = job.elapsed_ms
        self._metrics.job_completed(entity.id, entity.job_type, elapsed)
        record = None
        if self._audit is not None:
            record = ExecutionRecord(
                job_id=entity.id,
                attempt=entity.attempt,
                node_id=self.node_id,
                status=JobStatus.SUCCEEDED,
                started_at=job.started_at or datetime.now(UTC),
                finished_at=datetime.now(UTC),
                duration_ms=elapsed,
            )
        job.state = FINISHED
        assert self._batcher is not None
        self._batcher.succeed(
            PendingCompletion(
                Completion(job_id=entity.id, claim_seq=entity.claim_seq, result=stored_result),
                record,
                job,
                entity.job_type,
            )
        )
        self._release_slot(job)

    def _on_flushed(
        self, batch: Sequence[PendingCompletion], applied: Sequence[PendingCompletion]
    ) -> None:
        written = {id(item) for item in applied}
        stale = [i.completion.job_id for i in batch if id(i) not in written]
        # workflow steps and batch callbacks are handed on before the jobs are disowned, so
        # run_until_idle never sees a gap with nothing owned and their work still to come
        workflow = self._workflow
        if workflow is not None and applied:
            self._hand_on(
                "workflow",
                lambda: workflow.succeeded(
                    (i.token.entity, i.completion.result) for i in applied if i.token
                ),
            )
        self._hand_on(
            "batch",
            lambda: self._batches.children_finished(i.token.entity for i in applied if i.token),
        )
        with self._lock:
            for item in batch:
                self._disown(item.token)
        self._counters.add("succeeded", len(applied))
        if stale:
            self._counters.add("stale", len(stale))
            _log.warning(
                "completions of %d jobs were not written because their claim was superseded "
                "(cancelled or recovered by another node while running): %s",
                len(stale),
                ", ".join(str(s) for s in stale[:10]),
            )

    def _hand_on(self, what: str, hand_on: Callable[[], object]) -> None:
        """A finished job's follow-up (its workflow steps, its batch): a failure is logged and
        does not undo the written outcome (the sweeps of workflows and batches catch up)."""
        try:
            hand_on()
        except Exception:  # noqa: BLE001 - a pluggable part's or the store's failure
            _log.exception(
                "worker %s: handing finished jobs on to the %s failed", self.node_id, what
            )

    def _finish_failure(
        self, job: ClaimedJob, exc: BaseException, lazy: LazyJobLogger | None
    ) -> None:
        entity = job.entity
        self._flow.release(entity)  # resource permit (flow control)
        breaker = job.loaded.circuit_breaker if job.loaded is not None else None
        if isinstance(exc, CircuitBreakerOpenError) and breaker is not None:
            # Rejected by the breaker without running (it opened after the pre-check): not
            # a failed attempt; wait for the circuit, not for the job's backoff.
            if lazy is not None:
                lazy.finish()
            self._defer_for_circuit(job, breaker[0])
            return
        message = self._sanitizer.sanitize(exc)
        if lazy is not None:
            logged = self._codec.loggable_error(entity, message)
            lazy.get().error(f"attempt {entity.attempt} failed: {logged}")
            lazy.finish()
        job.state = FINISHED
        elapsed = job.elapsed_ms
        self._metrics.job_failed(entity.id, entity.job_type, exc, entity.attempt)
        delay: timedelta | None
        if isinstance(exc, REFUSED) and not job.called:
            delay = None  # the stored arguments can never be restored: retrying cannot help
        else:
            decision = decide_retry(
                self._retry_policy,
                attempt=entity.attempt,
                max_retries=entity.max_retries,
                backoff=self._backoff(entity),
                cause=exc,
            )
            delay = decision.delay
        trace = sanitized_traceback(exc, self._sanitizer)
        self._write_failure(job, message, delay, elapsed, trace=trace, cause=exc)
        self._release_slot(job)

    def _write_failure(
        self,
        job: ClaimedJob,
        message: str,
        delay: timedelta | None,
        elapsed: int,
        *,
        trace: str | None = None,
        cause: BaseException | None = None,
    ) -> None:
        """Log the failed attempt (WARNING when retried, ERROR for the dead letter, with the
        sanitized traceback) and schedule the retry after ``delay`` (None: dead letter),
        fenced by the claim."""
        entity = job.entity
        if delay is not None:
            _log.warning(
                "job %s (%s): attempt %d failed, retried in %.1fs: %s%s",
                entity.id,
                entity.target,
                entity.attempt,
                delay.total_seconds(),
                message,
                f"\n{trace}" if trace else "",
            )
        else:
            _log.error(
                "job %s (%s): attempt %d failed, sent to the dead letter: %s%s",
                entity.id,
                entity.target,
                entity.attempt,
                message,
                f"\n{trace}" if trace else "",
            )
        record = None
        if self._audit is not None:
            record = ExecutionRecord(
                job_id=entity.id,
                attempt=entity.attempt,
                node_id=self.node_id,
                status=JobStatus.FAILED,
                started_at=job.started_at or datetime.now(UTC),
                finished_at=datetime.now(UTC),
                duration_ms=elapsed,
                error=self._codec.seal_error(entity, message),
                traceback=self._codec.seal_error(entity, trace) if trace else None,
            )
        assert self._batcher is not None
        self._batcher.fail(
            PendingFailure(
                job_id=entity.id,
                claim_seq=entity.claim_seq,
                message=self._codec.seal_error(entity, message),  # encrypted jobs: sealed
                run_at=None if delay is None else self._now() + delay,
                record=record,
                token=job,
                cause=cause,
                plain_message=message,
            )
        )

    def _on_failure_written(self, item: PendingFailure, applied: bool | None) -> None:
        """The completer's report of one failure write: count it and stop owning the job
        (a job whose write failed is then recovered by the stale-job sweep)."""
        job: ClaimedJob = item.token
        if applied:
            self._counters.add("retried" if item.run_at is not None else "failed")
            # handed on before the job is disowned (see _on_flushed)
            workflow = self._workflow
            if workflow is not None:  # settles the steps waiting for a dead letter
                text = item.plain_message if item.plain_message is not None else item.message
                cause = item.cause if item.cause is not None else RuntimeError(text)
                self._hand_on(
                    "workflow",
                    lambda: workflow.failed(
                        job.entity, cause, text, dead_lettered=item.run_at is None
                    ),
                )
            if item.run_at is None:  # dead letter: its batch may be complete now
                self._hand_on("batch", lambda: self._batches.children_finished([job.entity]))
        with self._lock:
            self._disown(job)
        if applied is False:
            self._counters.add("stale")
            _log.warning(
                "job %s: outcome of attempt %d not written, its claim was superseded "
                "(cancelled or recovered elsewhere while running)",
                item.job_id,
                job.entity.attempt,
            )

    def _backoff(self, entity: JobEntity) -> BackoffPolicy | None:
        try:
            return decode_backoff(entity.backoff)
        except Exception:  # noqa: BLE001 - fall back to the default backoff
            _log.warning("job %s has an unreadable backoff; using the default", entity.id)
            return None

    def _write(self, operation: str, write: Callable[[], bool], job_id: UUID) -> bool | None:
        """A fenced outcome write, retried on transient errors (``retry_transient``). True or
        False as the store answered; None when it could not be written (the job stays RUNNING
        and, no longer heartbeated once disowned, is put back by the stale-job sweep)."""

        def timed() -> bool:
            started = time.perf_counter()
            try:
                result = write()
            except Exception:
                self._store_timing(operation, "failure", started)
                raise
            self._store_timing(operation, "success", started)
            return result

        try:
            return retry_transient(timed, is_retryable=self._is_transient)
        except Exception as exc:  # noqa: BLE001 - never lose the worker thread
            if isinstance(exc, StoreError):
                _log.error(
                    "job %s: %s failed (%s); the job stays RUNNING until recovery",
                    job_id,
                    operation,
                    one_line(exc),
                )
            else:
                _log.exception(
                    "job %s: %s failed; it stays RUNNING until recovery", job_id, operation
                )
            return None

    def _fail_unstarted(self, job: ClaimedJob, exc: TargetNotImportableError) -> None:
        """A job whose target cannot be imported here: a failed attempt, retried with backoff
        while the ``RetryPolicy`` allows (newer code may be deployed by then)."""
        entity = job.entity
        message = self._sanitizer.sanitize(exc)
        job.state = FINISHED
        self._metrics.job_failed(entity.id, entity.job_type, exc, entity.attempt)
        decision = decide_retry(
            self._retry_policy,
            attempt=entity.attempt,
            max_retries=entity.max_retries,
            backoff=self._backoff(entity),
            cause=exc,
        )
        trace = sanitized_traceback(exc, self._sanitizer)
        self._write_failure(job, message, decision.delay, 0, trace=trace, cause=exc)
        self._give_back(job)

    def _dead_letter_unstarted(self, job: ClaimedJob, reason: str) -> None:
        entity = job.entity
        job.state = FINISHED
        self._metrics.job_failed(entity.id, entity.job_type, _Refused(reason), entity.attempt)
        _log.error("job %s (%s) sent to the dead letter: %s", entity.id, entity.target, reason)
        applied = self._write(
            "mark_failed_terminal",
            lambda: self._store.mark_failed_terminal(entity.id, entity.claim_seq, reason),
            entity.id,
        )
        self._counters.add("failed" if applied else "stale")
        if applied:
            self._batches.children_finished([entity])
        with self._lock:
            self._disown(job)
        self._give_back(job)

    def _release_slot(self, job: ClaimedJob) -> None:
        next_job: ClaimedJob | None = None
        # finished (or given back): a noted started mark not yet written is not needed
        self._dispatch.forget(job.entity.id, job.entity.claim_seq)
        self._counters.add("running", -1)
        self._give_back(job)
        with self._lock:
            gate = self._gates.get(job.gate)
            if gate is not None and not (self._inline and not job.is_async):
                gate.running -= 1
                # a stopping worker starts nothing more: stop() gives the queued jobs back
                while gate.waiting and next_job is None and not self._stopping:
                    candidate = gate.waiting.popleft()
                    if candidate.state == QUEUED:
                        next_job = candidate
                        gate.running += 1
        if next_job is not None:
            self._submit(next_job)

    def _give_back(self, job: ClaimedJob) -> None:
        """Return ``job``'s slot to the producer (once per claimed job)."""
        with self._lock:
            if not job.holds_slot:
                return
            job.holds_slot = False
        self._slots.give_back()

    # ================================================================ shutdown helpers

    def _release_queued(self) -> None:
        with self._lock:
            queued = [j for j in self._owned.values() if j.state == QUEUED]
            for job in queued:
                job.state = RELEASED
            for gate in self._gates.values():
                gate.waiting.clear()
        for job in queued:
            entity = job.entity
            applied = self._write(
                "release_claim",
                lambda e=entity: self._store.release_claim(e.id, e.claim_seq),  # type: ignore[misc]
                entity.id,
            )
            with self._lock:
                self._disown(job)
            self._give_back(job)
            if applied:
                self._counters.add("released")

    def _requeue_interrupted(self, job: ClaimedJob) -> None:
        entity = job.entity
        reason = (
            f"WorkerShutdown: node {self.node_id} stopped before the job finished "
            f"(worker.shutdown_timeout {self.settings.shutdown_timeout.total_seconds():g}s)"
        )
        applied = self._write(
            "schedule_retry",
            lambda: self._store.schedule_retry(entity.id, entity.claim_seq, self._now(), reason),
            entity.id,
        )
        if applied:
            self._counters.add("retried")
            _log.warning("job %s was still running at shutdown; put back to pending", entity.id)

    # ================================================================ misc

    def _disown(self, job: ClaimedJob) -> None:
        """Forget ``job`` (call with the lock held) unless the job was claimed again since:
        a newer claim of the same job by this node (it was recovered as ours while it ran)
        stays owned and heartbeated."""
        if self._owned.get(job.entity.id) is job:
            del self._owned[job.entity.id]

    def _settling(self) -> bool:
        return self._workflow is not None and self._workflow.pending > 0

    def _owned_ids(self) -> list[UUID]:
        with self._lock:
            return list(self._owned)

    def _set_clock(self, offset: timedelta) -> None:
        self._clock_offset = offset

    def _refresh_clock(self) -> None:
        try:
            self._clock_offset = self._store.server_now() - datetime.now(UTC)
        except Exception:  # noqa: BLE001 - local clock then
            _log.debug("reading the store clock failed", exc_info=True)

    def _now(self) -> datetime:
        """The store's clock, approximated by the local clock plus the measured offset."""
        return datetime.now(UTC) + self._clock_offset


def _exit_now(signum: int, name: str) -> NoReturn:
    """A second SIGTERM/SIGINT during a graceful stop: end the process at once (exit code
    128 + signal number), without waiting for running jobs or writing their outcomes."""
    _log.error("signal %s received again: exiting at once without waiting for jobs", name)
    flush_queued_logging(timeout=1.0)
    for handler in logging.getLogger().handlers + _log.handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os._exit(128 + signum)


class _Refused(Exception):
    """Cause passed to metrics for jobs refused at dispatch."""


class _GuardedMetrics:
    """Forwards every call to a ``MetricsCollector``; an exception it raises is logged (once
    per method) and swallowed, so a failing collector cannot leave a job stuck RUNNING."""

    def __init__(self, inner: MetricsCollector) -> None:
        self._inner = inner
        self._reported: set[str] = set()
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Callable[..., None]:
        method = getattr(self._inner, name)
        if not callable(method):
            return method  # type: ignore[no-any-return]

        def guarded(*args: Any, **kwargs: Any) -> None:
            try:
                method(*args, **kwargs)
            except Exception:  # noqa: BLE001 - metrics are best effort
                with self._lock:
                    first = name not in self._reported
                    self._reported.add(name)
                if first:
                    _log.exception(
                        "metrics collector %s.%s failed (ignored; reported once)",
                        type(self._inner).__name__,
                        name,
                    )

        return guarded


__all__ = ["Worker"]
