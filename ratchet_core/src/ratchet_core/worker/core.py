"""The worker: claims due jobs and runs them; this class is the facade over its parts.

The parts (``docs/worker.md``, "Inside the worker"), from the ``WorkerParts`` container:

* the **table of claimed jobs** (``table.py``): every claimed job until its outcome is
  written; slots, gates, states, the ids to heartbeat, all under one lock;
* the **producer** (``producer.py``): the claim loop on the poller thread, sized by the table;
* the **dispatcher** (``dispatcher.py``) prepares each claimed job and starts it on its gate's
  thread; the **runner** (``runner.py``) takes it through admission (``admission.py``), the call
  (``executor.py``) and the outcome decision (``outcome.py``) and hands the outcome over;
* the **completer** (``completion.py``): the only writer of outcomes, in batches, fenced by
  claim sequence; after each write it tells its subscribers (``subscribers.py``);
* **maintenance** (``maintenance.py``): the heartbeat thread and the recovery thread.

This class keeps the lifecycle (start, stop, signals, ``run_until_idle``) and the wake-ups.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from types import FrameType
from typing import Any, NoReturn

from ratchet_api.errors import SchedulerStoppedError
from ratchet_api.model import JobWakeupHint
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
from ratchet_api.store.protocols import JobStore
from ratchet_core.features.recurring.runner import start_recurring
from ratchet_core.observability.logs import flush_queued_logging
from ratchet_core.payload.codec import PayloadCodec
from ratchet_core.runtime.stores import require_schema
from ratchet_core.worker.idle import is_idle
from ratchet_core.worker.outcome import Shutdown
from ratchet_core.worker.parts import Parts
from ratchet_core.worker.settings import WorkerSettings
from ratchet_core.worker.stats import WorkerStats

_log = logging.getLogger("ratchet.worker")


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
        parts: Any = None,
    ) -> None:
        self.settings = worker_settings or WorkerSettings.from_config(settings)
        self._parts = Parts(
            self.settings,
            store=store,
            config=settings,
            serializer=serializer,
            resolver=resolver,
            loader=loader,
            retry_policy=retry_policy,
            sanitizer=error_sanitizer,
            metrics=metrics,
            executor_provider=executor_provider,
            tuning=tuning,
            polling=polling,
            logger_factory=logger_factory,
            bean_resolver=bean_resolver,
            node_identity=node_identity,
            tag_affinity=tag_affinity,
            startup=startup,
            result_persistence=result_persistence,
            arg_resolver=arg_resolver,
            resilience=resilience,
            breaker_config=breaker_config,
            codec=codec,
            authorization=authorization,
            template=parts,  # the container's worker_parts, with its overrides
        )
        p = self._parts
        self.node_id = p.node_id
        # what the workflow driver reads (workflow.driver.create_driver)
        self._store = store
        self._resolver = p.loader
        self._class_policy = class_policy
        self._serializer = serializer
        self._sanitizer = error_sanitizer
        self._codec = codec  # opens sealed results, errors and conditions when settling
        self._metrics = p.metrics
        self._cluster = cluster
        self._startup = startup
        self._hooks = list(lifecycle_hooks)
        self._scheduler = scheduler
        self._config = settings
        self._lock = threading.Lock()
        self._state = "new"
        self._stop_requested = threading.Event()
        self._listeners_registered = False

    # ================================================================ lifecycle

    @property
    def stats(self) -> WorkerStats:
        """Counters since creation (``running`` is the number of jobs executing now)."""
        return self._parts.snapshot()

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
        p = self._parts
        try:
            require_schema(self._store, remember=True)
            recurring = start_recurring(  # declares @recurring/configured definitions
                self._store,
                self._config,
                self._scheduler,
                on_fired=p.producer.wake.set,
                metrics=p.metrics,
            )
            for hook in self._hooks:
                hook.before_start()
        except BaseException:
            with self._lock:
                self._state = "new"
            raise
        try:
            p.open(self, recurring)
        except BaseException:
            self._state = "stopped"  # its parts are spent (and "starting" is this call's)
            raise
        if not self._listeners_registered:
            self._listeners_registered = True
            self._cluster.register_wakeup_listener(self._on_cluster_wakeup)
            self._register_local_listener()
        with self._lock:
            self._state = "running"
        p.producer.start()
        s = self.settings
        _log.info(
            "worker %s started: concurrency sync=%d async=%d, prefetch %d, store %s",
            self.node_id,
            p.sync_limit,
            p.async_limit,
            s.prefetch,
            p.store_name,
        )
        self._run_hooks("after_start")

    def stop(self, timeout: float | None = None) -> WorkerStats:
        """Stop gracefully: stop claiming, give back claimed jobs not yet started, let running
        jobs finish for up to ``timeout`` s (default ``worker.shutdown_timeout``), put those
        still running back to pending (abandoned), write pending outcomes, stop heartbeating,
        delete this node's row and close the ``ClusterCoordinator``. Idempotent; final stats."""
        with self._lock:
            if self._state != "running":
                return self._parts.snapshot()
            self._state = "stopping"
        p = self._parts
        p.table.halt()
        self._run_hooks("before_stop")
        limit = self.settings.shutdown_timeout.total_seconds() if timeout is None else timeout
        p.producer.stop(timeout=max(limit, 5.0) + 30)
        for job in p.table.queued():
            p.dispatcher.abandon(job)
        p.table.wait_until_none_active(limit)
        leftovers = p.table.running_jobs()
        reason = (
            f"WorkerShutdown: node {self.node_id} stopped before the job finished "
            f"(worker.shutdown_timeout {self.settings.shutdown_timeout.total_seconds():g}s)"
        )
        # counted from the hand-overs taken: a job that finished meanwhile is not abandoned
        abandoned = [
            job
            for job in leftovers
            if p.runner.hand(job, p.runner.decide(job, Shutdown(started=True, reason=reason)))[0]
        ]
        p.flow.close()  # permits are renewed until no job of this worker runs any more
        if abandoned:
            p.counters.add("abandoned", len(abandoned))
            _log.error(
                "worker %s: %d jobs still running after the shutdown timeout (%gs) were "
                "abandoned and put back to pending: %s",
                self.node_id,
                len(abandoned),
                limit,
                ", ".join(f"{j.entity.id} ({j.entity.target})" for j in abandoned),
            )
        p.close()
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
        stats = p.snapshot()
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

    def run_until_idle(
        self, timeout: float = 30.0, *, due_within: float | None = None
    ) -> WorkerStats:
        """Run until no due job is left and nothing is in flight, then stop (if this call
        started the worker). Jobs this worker put back (retries, and jobs deferred by a
        resource permit, a rate limit or an open circuit) that come due within ``due_within``
        seconds (default ``timeout``) are waited for when the store can be queried
        (``JobQueryStore``): a caller running it in slices (``ratchet worker --burst``) passes
        the time left of its whole run. Returns the stats; ``stats.idle`` is False when
        ``timeout`` passed first."""
        started_here = self._state != "running"
        if started_here:
            self.start()
        now = time.monotonic()
        deadline = now + timeout
        horizon = now + (timeout if due_within is None else max(timeout, due_within))
        idle = False
        try:
            while time.monotonic() < deadline:
                if is_idle(self._parts, deadline, horizon):
                    idle = True
                    break
        finally:
            if started_here:
                self.stop()
        return self._parts.snapshot(idle=idle)

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
        targets = self._parts.targets
        if target is not None and targets is not None and target not in targets:
            return
        self._metrics.cluster_wakeup_received(hint.source.node_id, target or "")
        self._request_poll()

    def _request_poll(self) -> None:
        self._parts.producer.request_poll()

    def _now(self) -> datetime:
        """The store's clock, approximated by the local clock plus the measured offset."""
        return self._parts.now()


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


__all__ = ["Worker"]
