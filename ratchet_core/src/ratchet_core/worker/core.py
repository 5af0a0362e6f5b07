"""The worker: claims due jobs and runs them.

Threads of one worker:

* the **poller** claims jobs in batches sized to the free capacity
  (``worker.concurrency`` + ``worker.prefetch``), waits with the ``PollingStrategyProvider``'s
  adaptive delay when the queue is empty, and is woken early by local enqueues
  (``SchedulerService.add_local_wakeup_listener``) and by other nodes (``ClusterCoordinator``);
  for each claimed job it decodes the invocation and repeats the security checks
  (``resolver.load``) before anything runs; a refused job goes to the dead letter with the reason,
  while a target that cannot be imported (``TargetNotImportableError``: a worker with older code
  during a rolling deploy) is a failed attempt, retried with backoff like any other failure;
* the **job threads** of the ``ExecutorProvider``'s pool run ``def`` targets; ``async def``
  targets run on one asyncio event loop in a dedicated thread. Concurrency is limited per
  execution type (``sync``, ``async`` or the job's execution target label) through the
  ``ExecutionTuningProvider``;
* the **completion flusher** writes successes in batches (fenced by claim sequence);
* the **heartbeat** thread keeps the node and its jobs alive and recovers work of dead nodes.

Failures are written one by one: retried after the job's backoff while the ``RetryPolicy``
allows, otherwise sent to the dead letter with the ``ErrorSanitizer``'s message. A write refused
because the claim was superseded (the job was cancelled, or recovered by another node) is logged
and counted as stale; it never overwrites the newer state.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any, cast
from uuid import UUID

import attrs

from ratchet_api.errors import (
    CircuitBreakerOpenError,
    ClassNotAllowedError,
    ConfigurationError,
    InvalidTargetError,
    PayloadError,
    SchedulerStoppedError,
    StoreError,
    TargetNotImportableError,
)
from ratchet_api.model import (
    BackoffPolicy,
    JobLoggerContext,
    JobStatus,
    JobWakeupHint,
    ThreadingMode,
)
from ratchet_api.scheduler import JobContext
from ratchet_api.spi import (
    BeanResolver,
    ClassPolicy,
    ClusterCoordinator,
    ErrorSanitizer,
    ExecutionTuningProvider,
    ExecutorProvider,
    JobInvocationResolver,
    JobLogger,
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
)
from ratchet_api.store.entities import Completion, ExecutionRecord, JobEntity, JobQuery
from ratchet_api.store.protocols import (
    JobAuditStore,
    JobExtensionStore,
    JobQueryStore,
    JobStore,
)
from ratchet_core.batches import BatchTracker
from ratchet_core.context import RunningJobContext
from ratchet_core.flow_control import FlowControl
from ratchet_core.payload import decode_backoff, decode_invocation
from ratchet_core.retry import decide_retry
from ratchet_core.stores import require_schema
from ratchet_core.worker.completion import CompletionBatcher, PendingCompletion
from ratchet_core.worker.execution import (
    FINISHED,
    QUEUED,
    RELEASED,
    RUNNING,
    ClaimedJob,
    LoadingResolver,
)
from ratchet_core.worker.maintenance import Maintenance
from ratchet_core.worker.settings import WorkerSettings
from ratchet_core.worker.stats import Counters, WorkerStats

_log = logging.getLogger("ratchet.worker")

_REFUSED = (InvalidTargetError, ClassNotAllowedError, PayloadError)
"""Dispatch-time refusals: the job can never run as stored, so it is not retried."""

_WRITE_TRIES = 4

_JOB_ERRORS = (Exception, SystemExit, KeyboardInterrupt, asyncio.CancelledError)
"""What a job may raise and still get an outcome: ``sys.exit()`` in job code and a
``CancelledError`` escaping a coroutine are failed attempts, never a job left RUNNING with its
slot taken. (``GeneratorExit`` is left alone: it closes an abandoned coroutine.)"""


@attrs.define
class _Gate:
    """Concurrency of one execution type."""

    limit: int
    running: int = 0
    waiting: deque[ClaimedJob] = attrs.field(factory=deque)


class _LazyLogger:
    """Creates the job logger on first use, so jobs that never log pay nothing."""

    __slots__ = ("_context", "_factory", "logger")

    def __init__(self, factory: JobLoggerFactory, context: JobLoggerContext) -> None:
        self._factory = factory
        self._context = context
        self.logger: JobLogger | None = None

    def get(self) -> JobLogger:
        if self.logger is None:
            self.logger = self._factory.create(self._context)
        return self.logger

    def finish(self) -> None:
        logger = self.logger
        if logger is None:
            return
        for name in ("flush", "close"):
            method = getattr(logger, name, None)
            if callable(method):
                try:
                    method()
                except Exception:  # noqa: BLE001 - logging never fails a job
                    _log.debug("job logger %s() failed", name, exc_info=True)


class _Context(RunningJobContext):
    """``RunningJobContext`` whose logger is created lazily."""

    __slots__ = ("_lazy",)

    def __init__(self, lazy: _LazyLogger, **kwargs: Any) -> None:
        super().__init__(logger=None, **kwargs)  # type: ignore[arg-type]
        self._lazy = lazy

    @property
    def logger(self) -> JobLogger:
        return self._lazy.get()


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
    ) -> None:
        if not callable(getattr(resolver, "load", None)) or not callable(
            getattr(resolver, "bind_arguments", None)
        ):
            raise ConfigurationError(
                "job_invocation_resolver",
                f"{type(resolver).__name__} cannot be used by the worker: it needs load() and "
                "bind_arguments() (extend ratchet_core.invocation.DefaultJobInvocationResolver)",
            )
        self._store = store
        self._serializer = serializer
        self._resolver: LoadingResolver = resolver  # type: ignore[assignment]
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
        self.settings = worker_settings or WorkerSettings.from_config(settings)
        s = self.settings

        self._audit = store.capability(JobAuditStore) if s.audit else None
        self._extension = store.capability(JobExtensionStore)
        self._query = store.capability(JobQueryStore)
        self._store_name = type(store).__name__

        self._inline = tuning.default_threading_mode() is ThreadingMode.INLINE
        self._sync_limit = tuning.max_concurrency("sync", s.concurrency)
        self._async_limit = tuning.max_concurrency("async", s.concurrency)
        self._capacity = max(1, s.concurrency + s.prefetch)
        # While every job thread is busy, claim again only once this many slots are free:
        # fewer, larger claims (a claim costs about as much for 50 jobs as for 5). A free job
        # thread is never kept waiting for the watermark.
        self._watermark = max(1, min(s.claim_batch_size, self._capacity) // 2)
        self._busy_at = max(1, s.concurrency)
        self._targets = list(s.execution_targets) or None
        self._tags = None if self._tag_filter.is_empty else self._tag_filter

        self._lock = threading.Lock()
        self._owned: dict[UUID, ClaimedJob] = {}
        self._active = 0
        self._gates: dict[str, _Gate] = {
            "sync": _Gate(self._sync_limit),
            "async": _Gate(self._async_limit),
        }
        self._counters = Counters()
        self._clock_offset = timedelta(0)

        self._wake = threading.Event()
        self._wakeup_requested = False
        self._slot_waiting = False
        self._empty_polls = 0
        self._idle_cond = threading.Condition(self._lock)

        self._state = "new"
        self._stopping = False
        self._stop_requested = threading.Event()
        self._poller: threading.Thread | None = None
        self._executor: Executor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._batcher: CompletionBatcher | None = None
        self._maintenance: Maintenance | None = None
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
        )
        if not self._inline:
            self._executor = self._executor_provider.job_executor(self._sync_limit)
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
        ``worker.shutdown_timeout``), put jobs still running afterwards back to pending, write
        pending completions and stop heartbeating. Idempotent; returns the final stats."""
        with self._lock:
            if self._state != "running":
                return self._counters.snapshot()
            self._state = "stopping"
            self._stopping = True
        self._run_hooks("before_stop")
        self._flow.close()
        limit = self.settings.shutdown_timeout.total_seconds() if timeout is None else timeout
        self._wake.set()
        if self._poller is not None and self._poller is not threading.current_thread():
            self._poller.join(timeout=max(limit, 5.0) + 30)
        self._release_queued()
        deadline = time.monotonic() + limit
        with self._lock:
            while self._active > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._idle_cond.wait(remaining)
            leftovers = [j for j in self._owned.values() if j.state == RUNNING]
        for job in leftovers:
            self._requeue_interrupted(job)
        if self._batcher is not None:
            self._batcher.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        self._stop_loop()
        if self._maintenance is not None:
            self._maintenance.stop()
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
        handlers are restored afterwards."""
        previous: dict[int, Any] = {}
        if install_signal_handlers and threading.current_thread() is threading.main_thread():

            def handler(signum: int, frame: FrameType | None) -> None:
                _log.info("signal %s received: stopping gracefully", signal.Signals(signum).name)
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
            busy = bool(self._owned) or self._active > 0
            polls = self._empty_polls
        if busy:
            time.sleep(0.005)
            return False
        # Nothing in flight: idle once a poll that started after this moment finds nothing.
        self._request_poll()
        while time.monotonic() < deadline:
            with self._lock:
                if self._owned or self._active:
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
        batch = self.settings.claim_batch_size
        max_wait = self.settings.polling.max_interval.total_seconds()
        failures = 0
        while not self._stopping:
            free = self._capacity - self._active
            if free <= 0 or (self._active >= self._busy_at and free < self._watermark):
                self._slot_waiting = True
                active = self._active
                if active < self._busy_at or self._capacity - active >= self._watermark:
                    # freed meanwhile
                    self._slot_waiting = False
                    continue
                self._wake.wait(max_wait)
                self._wake.clear()
                self._slot_waiting = False
                continue
            want = min(free, batch)
            self._wakeup_requested = False
            try:
                claimed = self._claim(want)
                failures = 0
            except Exception as exc:  # noqa: BLE001 - the poller must survive store outages
                failures += 1
                reason = type(exc).__name__
                self._metrics.claim_transient_failure(reason)
                pause = min(0.1 * 2**failures, 5.0)
                _log.warning("claiming jobs failed (%s); retrying in %.1fs", exc, pause)
                self._wake.wait(pause)
                self._wake.clear()
                continue
            if claimed:
                self._metrics.jobs_claimed(self.node_id, len(claimed))
                for entity in claimed:
                    # one job's failure must not strand the rest of the batch (claimed by
                    # this node but unknown to it until stale recovery)
                    try:
                        self._accept(entity)
                    except Exception:  # noqa: BLE001 - a pluggable part's bug
                        _log.exception(
                            "worker %s: accepting job %s failed; releasing its claim",
                            self.node_id,
                            entity.id,
                        )
                        self._abandon(entity)
                if len(claimed) == want:
                    continue  # the queue probably holds more: claim again at once
            else:
                with self._lock:
                    self._empty_polls += 1
            self._batches.sweep_every(self.settings.recovery_interval.total_seconds())
            delay = strategy.next_delay(len(claimed), free).total_seconds()
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

    def _accept(self, entity: JobEntity) -> None:
        job = ClaimedJob(entity)
        with self._lock:
            self._owned[entity.id] = job
            self._active += 1
        self._counters.add("claimed")
        refusal = self._prepare(job)
        if isinstance(refusal, TargetNotImportableError):
            self._fail_unstarted(job, refusal)
            return
        if refusal is not None:
            self._dead_letter_unstarted(job, refusal)
            return
        if self._inline and not job.is_async:
            self._run_sync(job)
            return
        with self._lock:
            gate = self._gates.get(job.gate)
            if gate is None:
                gate = self._gates[job.gate] = _Gate(
                    self._tuning.max_concurrency(job.gate, self.settings.concurrency)
                )
            if gate.running >= gate.limit:
                gate.waiting.append(job)
                return
            gate.running += 1
        try:
            self._submit(job)
        except BaseException:
            with self._lock:
                if job.state == QUEUED:
                    gate.running -= 1
            raise

    def _abandon(self, entity: JobEntity) -> None:
        """Give back the claim of a job whose acceptance failed before it started: fenced
        ``release_claim`` (the attempt is not counted), so another poll runs it."""
        with self._lock:
            job = self._owned.get(entity.id)
            if job is not None and job.entity is entity:
                if job.state != QUEUED and job.started_at is not None:
                    return  # it started: its own outcome path accounts for it
                job.state = RELEASED
                for gate in self._gates.values():
                    if job in gate.waiting:
                        gate.waiting.remove(job)
                self._disown(job)
                self._active -= 1
                self._idle_cond.notify_all()
        applied = self._write(
            "release_claim",
            lambda: self._store.release_claim(entity.id, entity.claim_seq),
            entity.id,
        )
        if applied:
            self._counters.add("released")
        if self._slot_waiting:
            self._wake.set()

    def _prepare(self, job: ClaimedJob) -> str | TargetNotImportableError | None:
        """Decode and re-check the job; the reason it must not run (a target that cannot be
        imported here: the error, to be retried), or None."""
        entity = job.entity
        if entity.attempt > entity.max_retries + 1:
            return (
                f"WorkerLost: attempt {entity.attempt} exceeds max_retries {entity.max_retries} "
                "after the previous attempt's worker stopped; not run again"
            )
        try:
            invocation = decode_invocation(entity.payload, entity.id)
            loaded = self._resolver.load(invocation)
        except TargetNotImportableError as exc:
            return exc
        except _REFUSED as exc:
            return f"refused at dispatch: {self._sanitizer.sanitize(exc)}"
        except Exception as exc:  # noqa: BLE001 - an unexpected loader error is a refusal too
            return f"cannot load the job target: {self._sanitizer.sanitize(exc)}"
        job.invocation = invocation
        job.loaded = loaded
        label = entity.execution_target
        job.gate = label if label else ("async" if loaded.is_async else "sync")
        return None

    def _submit(self, job: ClaimedJob) -> None:
        if job.is_async:
            loop = self._event_loop()
            asyncio.run_coroutine_threadsafe(self._run_async(job), loop)
        elif self._executor is None:
            self._run_sync(job)
        else:
            try:
                self._executor.submit(self._run_sync, job)
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
        delay = self._flow.admit(job.entity)  # resource permit, rate limit
        if delay is not None:
            self._gate_rejected(job, delay)
            return False
        job.started_at = datetime.now(UTC)
        job.started_mono = time.perf_counter()
        self._counters.add("running")
        entity = job.entity
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
        self._counters.add("running")  # _release_slot counts it down again
        self._release_slot(job)

    def _context(self, job: ClaimedJob) -> tuple[JobContext | None, _LazyLogger | None]:
        if not job.loaded.context_parameters:
            return None, None
        entity = job.entity
        lazy = _LazyLogger(
            self._logger_factory,
            JobLoggerContext(
                job_id=entity.id,
                target=entity.target,
                attempt=entity.attempt,
                node_id=self.node_id,
                job_type=entity.job_type,
            ),
        )
        ctx = _Context(
            lazy,
            job_id=entity.id,
            attempt=entity.attempt,
            claim_seq=entity.claim_seq,
            extension_store=self._extension,
            serializer=self._serializer,
        )
        return ctx, lazy

    def _call_plan(
        self, job: ClaimedJob, ctx: JobContext | None
    ) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], Any]:
        """The function, its arguments and the bean handle (or None) for one call."""
        invocation = job.invocation
        assert invocation is not None
        patched = self._arg_resolver.resolve_arguments(job.entity.id, invocation)
        if patched is not None and patched is not invocation:
            # Only the arguments of the hook's answer are honoured: the target stays the one
            # that passed the security checks.
            invocation = attrs.evolve(invocation, args=patched.args, kwargs=patched.kwargs)
        args, kwargs = self._resolver.bind_arguments(job.loaded, invocation, ctx)
        owner = job.loaded.owner_class
        if owner is None:
            return job.loaded.function, args, kwargs, None
        bean = self._beans.acquire(owner)
        return job.loaded.function, (bean.instance, *args), kwargs, bean

    def _run_sync(self, job: ClaimedJob) -> None:
        if not self._begin(job):
            return
        lazy: _LazyLogger | None = None
        try:
            ctx, lazy = self._context(job)
            function, args, kwargs, bean = self._call_plan(job, ctx)
            try:
                breaker = job.loaded.circuit_breaker
                job.called = True
                if breaker is None:
                    result = function(*args, **kwargs)
                else:
                    service, exception_filter = breaker
                    result = self._resilience.execute(
                        service, lambda: function(*args, **kwargs), exception_filter
                    )
            finally:
                if bean is not None:
                    bean.close()
        except _JOB_ERRORS as exc:  # every job error goes through the retry path
            self._finish_failure(job, exc, lazy)
        else:
            self._finish_success(job, result, lazy)

    async def _run_async(self, job: ClaimedJob) -> None:
        if not self._begin(job):
            return
        lazy: _LazyLogger | None = None
        try:
            ctx, lazy = self._context(job)
            function, args, kwargs, bean = self._call_plan(job, ctx)
            try:
                breaker = job.loaded.circuit_breaker
                job.called = True
                if breaker is None:
                    result = await function(*args, **kwargs)
                else:
                    service, exception_filter = breaker
                    result = await self._resilience.execute_async(
                        service, lambda: function(*args, **kwargs), exception_filter
                    )
            finally:
                if bean is not None:
                    bean.close()
        except _JOB_ERRORS as exc:  # every job error goes through the retry path
            self._finish_failure(job, exc, lazy)
        else:
            self._finish_success(job, result, lazy)

    # ================================================================ outcomes

    def _finish_success(self, job: ClaimedJob, result: Any, lazy: _LazyLogger | None) -> None:
        entity = job.entity
        self._flow.release(entity)
        try:
            serialized = self._results.serialize(entity.id, result)
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
        self._batcher.add(
            PendingCompletion(
                Completion(job_id=entity.id, claim_seq=entity.claim_seq, result=serialized.json),
                record,
                job,
            )
        )
        self._release_slot(job)

    def _on_flushed(self, batch: Sequence[PendingCompletion], applied: set[UUID]) -> None:
        stale = [i.completion.job_id for i in batch if i.completion.job_id not in applied]
        with self._lock:
            for item in batch:
                self._disown(item.token)
            self._idle_cond.notify_all()
        self._counters.add("succeeded", len(batch) - len(stale))
        self._batches.children_finished(
            i.token.entity for i in batch if i.token and i.completion.job_id in applied
        )
        if stale:
            self._counters.add("stale", len(stale))
            _log.warning(
                "completions of %d jobs were not written because their claim was superseded "
                "(cancelled or recovered by another node while running): %s",
                len(stale),
                ", ".join(str(s) for s in stale[:10]),
            )

    def _finish_failure(
        self, job: ClaimedJob, exc: BaseException, lazy: _LazyLogger | None
    ) -> None:
        entity = job.entity
        self._flow.release(entity)
        message = self._sanitizer.sanitize(exc)
        if lazy is not None:
            lazy.get().error(f"attempt {entity.attempt} failed: {message}")
            lazy.finish()
        job.state = FINISHED
        elapsed = job.elapsed_ms
        self._metrics.job_failed(entity.id, entity.job_type, exc, entity.attempt)
        breaker = job.loaded.circuit_breaker if job.loaded is not None else None
        if isinstance(exc, CircuitBreakerOpenError) and breaker is not None:
            # Rejected without running: wait for the circuit, not for the job's backoff. The
            # store has no unfenced "reschedule without counting", so the attempt stays
            # counted (the job's max_retries therefore also bounds circuit rejections).
            delay: timedelta | None = self._resilience.get_retry_delay(breaker[0])
        elif isinstance(exc, _REFUSED) and not job.called:
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
        self._write_failure(job, message, delay, elapsed)
        with self._lock:
            self._disown(job)
        self._release_slot(job)

    def _write_failure(
        self, job: ClaimedJob, message: str, delay: timedelta | None, elapsed: int
    ) -> None:
        """Schedule the retry after ``delay`` (None: dead letter), fenced by the claim."""
        entity = job.entity
        if delay is not None:
            run_at = self._now() + delay
            applied = self._write(
                "schedule_retry",
                lambda: self._store.schedule_retry(entity.id, entity.claim_seq, run_at, message),
                entity.id,
            )
            outcome = "retried"
        else:
            applied = self._write(
                "mark_failed_terminal",
                lambda: self._store.mark_failed_terminal(entity.id, entity.claim_seq, message),
                entity.id,
            )
            outcome = "failed"
        if applied:
            self._counters.add(outcome)
            self._save_failure_record(job, message, elapsed)
            if delay is None:
                self._batches.children_finished([entity])
        elif applied is False:
            self._counters.add("stale")
            _log.warning(
                "job %s: outcome of attempt %d not written, its claim was superseded "
                "(cancelled or recovered elsewhere while running)",
                entity.id,
                entity.attempt,
            )

    def _backoff(self, entity: JobEntity) -> BackoffPolicy | None:
        try:
            return decode_backoff(entity.backoff)
        except Exception:  # noqa: BLE001 - fall back to the default backoff
            _log.warning("job %s has an unreadable backoff; using the default", entity.id)
            return None

    def _save_failure_record(self, job: ClaimedJob, message: str, elapsed: int) -> None:
        if self._audit is None:
            return
        entity = job.entity
        try:
            self._audit.save_execution(
                ExecutionRecord(
                    job_id=entity.id,
                    attempt=entity.attempt,
                    node_id=self.node_id,
                    status=JobStatus.FAILED,
                    started_at=job.started_at or datetime.now(UTC),
                    finished_at=datetime.now(UTC),
                    duration_ms=elapsed,
                    error=message,
                )
            )
        except Exception:  # noqa: BLE001 - audit is best effort
            _log.warning("saving the execution record of job %s failed", entity.id, exc_info=True)

    def _write(self, operation: str, write: Callable[[], bool], job_id: UUID) -> bool | None:
        """A fenced outcome write with retries on transient errors. True/False as the store
        answered; None when it could not be written (the job stays RUNNING for recovery)."""
        delay = 0.05
        for attempt in range(1, _WRITE_TRIES + 1):
            started = time.perf_counter()
            try:
                result = write()
            except StoreError as exc:
                self._store_timing(operation, "failure", started)
                if not exc.retryable or attempt == _WRITE_TRIES:
                    _log.error(
                        "job %s: %s failed (%s); the job stays RUNNING until recovery",
                        job_id,
                        operation,
                        exc,
                    )
                    return None
                time.sleep(delay)
                delay *= 2
                continue
            except Exception:  # noqa: BLE001 - never lose the worker thread
                self._store_timing(operation, "failure", started)
                _log.exception(
                    "job %s: %s failed; it stays RUNNING until recovery", job_id, operation
                )
                return None
            self._store_timing(operation, "success", started)
            return result
        return None

    def _fail_unstarted(self, job: ClaimedJob, exc: TargetNotImportableError) -> None:
        """A job whose target cannot be imported here: a failed attempt, retried with backoff
        while the ``RetryPolicy`` allows (newer code may be deployed by then)."""
        entity = job.entity
        message = self._sanitizer.sanitize(exc)
        job.state = FINISHED
        self._metrics.job_failed(entity.id, entity.job_type, exc, entity.attempt)
        _log.warning(
            "job %s (%s): attempt %d failed: %s", entity.id, entity.target, entity.attempt, message
        )
        decision = decide_retry(
            self._retry_policy,
            attempt=entity.attempt,
            max_retries=entity.max_retries,
            backoff=self._backoff(entity),
            cause=exc,
        )
        self._write_failure(job, message, decision.delay, 0)
        with self._lock:
            self._disown(job)
            self._active -= 1
            self._idle_cond.notify_all()
        if self._slot_waiting:
            self._wake.set()

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
            self._active -= 1
            self._idle_cond.notify_all()
        if self._slot_waiting:
            self._wake.set()

    def _release_slot(self, job: ClaimedJob) -> None:
        next_job: ClaimedJob | None = None
        self._counters.add("running", -1)
        with self._lock:
            self._active -= 1
            gate = self._gates.get(job.gate)
            if gate is not None and not (self._inline and not job.is_async):
                gate.running -= 1
                while gate.waiting and next_job is None:
                    candidate = gate.waiting.popleft()
                    if candidate.state == QUEUED:
                        next_job = candidate
                        gate.running += 1
            self._idle_cond.notify_all()
        if next_job is not None:
            self._submit(next_job)
        if self._slot_waiting:
            self._wake.set()

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
                self._active -= 1
                self._idle_cond.notify_all()
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
