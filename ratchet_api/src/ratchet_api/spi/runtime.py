"""Runtime SPIs: configuration, execution, polling, logging, metrics, cluster, lifecycle,
bean resolution and transactions."""

from __future__ import annotations

import enum
from collections.abc import Callable
from concurrent.futures import Executor
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable
from uuid import UUID

import attrs

from ratchet_api.model import (
    JobLoggerContext,
    JobType,
    JobWakeupHint,
    NodeIdentity,
    NodeTagFilter,
    PollingConfig,
    ThreadingMode,
)

T = TypeVar("T")


# ---------------------------------------------------------------- configuration


@attrs.frozen
class RatchetConfigKey(Generic[T]):
    """A typed configuration key. ``name`` is dotted (``worker.concurrency``); its environment
    variable is ``RATCHET_`` + the name upper-cased with dots and dashes as underscores.
    ``parse`` turns the raw string into ``T`` and raises ``ValueError`` for a malformed value."""

    name: str
    parse: Callable[[str], T] = attrs.field(eq=False)
    default: T
    description: str = ""

    @property
    def environment_variable(self) -> str:
        return "RATCHET_" + self.name.upper().replace(".", "_").replace("-", "_")


@runtime_checkable
class RatchetConfigSource(Protocol):
    """One raw source of configuration (a dict, the environment, a TOML file, a framework's
    settings). Returns the raw string, or None when the source does not define the key."""

    def get(self, property_name: str, environment_variable: str) -> str | None: ...


@runtime_checkable
class RatchetConfig(Protocol):
    """Typed configuration resolved through a chain of sources (first source that defines a key
    wins). ``get`` raises ``ConfigurationError`` naming the key for a malformed value."""

    def get(self, key: RatchetConfigKey[T]) -> T: ...

    def raw(self, key: RatchetConfigKey[Any]) -> str | None: ...


# ---------------------------------------------------------------- execution


@runtime_checkable
class ExecutionTuningProvider(Protocol):
    """Per-execution-type concurrency. Execution types are ``"sync"`` and ``"async"`` plus any
    execution target label a job names."""

    def default_threading_mode(self) -> ThreadingMode: ...

    def max_concurrency(self, execution_type: str, default_value: int) -> int:
        """Jobs of this type that may run at once on this node (>= 1)."""
        ...


@runtime_checkable
class PollingDelayStrategy(Protocol):
    """Stateful delay between polls. Called by one poller thread only."""

    def next_delay(self, claimed: int, capacity: int) -> timedelta:
        """Delay after a poll that claimed ``claimed`` jobs with ``capacity`` free slots."""
        ...

    def reset(self) -> None:
        """Called on a wake-up: the next delay starts from the minimum."""
        ...


@runtime_checkable
class PollingStrategyProvider(Protocol):
    """Creates the poller's delay strategy."""

    def create(self, config: PollingConfig) -> PollingDelayStrategy: ...


@runtime_checkable
class ExecutorProvider(Protocol):
    """Thread pools for job execution. The worker owns the lifecycle of what it gets: it calls
    ``shutdown`` on stop."""

    def job_executor(self, max_workers: int) -> Executor:
        """An executor for synchronous jobs with at least ``max_workers`` threads."""
        ...


# ---------------------------------------------------------------- logging


@runtime_checkable
class JobLogger(Protocol):
    """A job-scoped logger handed to a job through ``JobContext``. Thread safe."""

    def trace(self, message: str) -> None: ...

    def debug(self, message: str) -> None: ...

    def info(self, message: str) -> None: ...

    def warn(self, message: str) -> None: ...

    def error(self, message: str) -> None: ...


@runtime_checkable
class JobLoggerFactory(Protocol):
    """Creates the ``JobLogger`` for each execution."""

    def create(self, context: JobLoggerContext) -> JobLogger: ...


# ---------------------------------------------------------------- metrics


class SignalOutcome(enum.StrEnum):
    """What one signal did to one job (``MetricsCollector.signal_delivered``,
    ``ratchet_api.workflow.SignalDecision``)."""

    DELIVERED = "DELIVERED"
    """This call delivered the payload: the job is now due."""
    ALREADY_DELIVERED = "ALREADY_DELIVERED"
    """An earlier (or a concurrent) signal was delivered first."""
    NOT_WAITING = "NOT_WAITING"
    """The job does not wait for a signal now (it never did, still waits for its parent, was
    cancelled or finished)."""
    TIMED_OUT = "TIMED_OUT"
    """The job's signal timeout passed first."""
    NOT_FOUND = "NOT_FOUND"
    """No job has this id, or none uses this signal key."""


@runtime_checkable
class MetricsCollector(Protocol):
    """Job lifecycle metrics. Called on hot paths from many threads: implementations must be
    fast, thread safe and must never raise."""

    def job_started(self, job_id: UUID, job_type: JobType, priority: int) -> None: ...

    def job_completed(self, job_id: UUID, job_type: JobType, execution_time_ms: int) -> None: ...

    def job_failed(
        self, job_id: UUID, job_type: JobType, cause: BaseException, attempt: int
    ) -> None: ...

    def success_finalization_retried(self, job_id: UUID, job_type: JobType) -> None: ...

    def success_finalization_minimal(self, job_id: UUID, job_type: JobType) -> None: ...

    def success_finalization_stuck(self, job_id: UUID, job_type: JobType) -> None: ...

    def claim_transient_failure(self, reason: str) -> None: ...

    def jobs_claimed(self, node_id: str, count: int) -> None: ...

    def gate_rejected(self, gate: str, reason: str) -> None: ...

    def local_wakeup(self, reason: str) -> None: ...

    def execution_target_fallback(self, requested: str, used: str) -> None: ...

    def cluster_wakeup_published(self, node_id: str, execution_target: str) -> None: ...

    def cluster_wakeup_received(self, node_id: str, execution_target: str) -> None: ...

    def callback_failed(
        self, job_id: UUID, job_type: JobType, cause: BaseException, attempt: int
    ) -> None: ...

    def signal_waiting(self, job_id: UUID, job_type: JobType, signal_key: str) -> None: ...

    def signal_delivered(
        self, job_id: UUID, job_type: JobType, signal_key: str, outcome: SignalOutcome
    ) -> None: ...

    def signal_timed_out(self, job_id: UUID, job_type: JobType, signal_key: str) -> None: ...

    def signal_cancelled(self, job_id: UUID, job_type: JobType, signal_key: str) -> None: ...

    def store_operation(
        self, store: str, operation: str, outcome: str, duration_ms: int
    ) -> None: ...

    def poller_breaker_state(self, poller: str, state: str) -> None: ...

    def circuit_breaker_state(self, service: str, old_state: str, new_state: str) -> None: ...

    def encryption_integrity_violation(self, job_id: UUID, surface: str) -> None: ...

    def encryption_envelope_version_skew(self, job_id: UUID, found: int, expected: int) -> None: ...


# ---------------------------------------------------------------- cluster


@runtime_checkable
class ClusterCoordinator(Protocol):
    """Best-effort wake-ups between nodes so that new work starts without waiting for a poll."""

    def notify_new_work(
        self, priority: int, source: NodeIdentity, execution_target: str | None
    ) -> None:
        """Publish that work is available. Must not block for long and must not raise for a
        transport failure (log it: polling still finds the work)."""
        ...

    def register_wakeup_listener(self, listener: Callable[[JobWakeupHint], None]) -> None:
        """``listener`` is called (from any thread) when another node publishes; it must be fast
        and thread safe."""
        ...

    def close(self) -> None:
        """Release transport resources. Idempotent."""
        ...


@runtime_checkable
class StartupCoordinator(Protocol):
    """Leases for destructive startup work (orphan cleanup), so one node does it at a time."""

    def try_acquire(self, action_name: str, lease_ttl: timedelta) -> bool: ...

    def release(self, action_name: str) -> None: ...


@runtime_checkable
class NodeIdentityProvider(Protocol):
    """This node's identity, constant for the life of the process."""

    def get_node_id(self) -> str: ...

    def identity(self) -> NodeIdentity: ...


@runtime_checkable
class NodeTagAffinityProvider(Protocol):
    """Which jobs this node claims, by tag. The default filter is empty (claim anything)."""

    def tag_filter(self) -> NodeTagFilter: ...


# ---------------------------------------------------------------- lifecycle and beans


@runtime_checkable
class SchedulerLifecycleHook(Protocol):
    """Called around worker start and stop, in registration order. A hook that raises in
    ``before_start`` aborts the start; errors in the others are logged."""

    def before_start(self) -> None: ...

    def after_start(self) -> None: ...

    def before_stop(self) -> None: ...

    def after_stop(self) -> None: ...


class ManagedBean(AbstractContextManager[Any], Protocol):
    """An invocation-scoped instance; closing it releases a dependent (factory) instance."""

    @property
    def instance(self) -> Any: ...

    def close(self) -> None: ...


@runtime_checkable
class BeanResolver(Protocol):
    """Resolves instances of classes for non-static job targets."""

    def resolve(self, cls: type[T]) -> T:
        """An instance of ``cls``; ``LookupError`` if the container cannot provide one."""
        ...

    def validate_resolvable(self, cls: type[Any]) -> None:
        """Raise ``LookupError`` now (at enqueue) if ``cls`` cannot be resolved later."""
        ...

    def acquire(self, cls: type[Any]) -> ManagedBean:
        """An invocation-scoped handle; the worker always closes it after the call."""
        ...


class AfterCommitResult(enum.StrEnum):
    NO_ACTIVE_TRANSACTION = "NO_ACTIVE_TRANSACTION"
    """Run the action now: there is no transaction to wait for."""
    REGISTERED = "REGISTERED"
    """The registrar runs it after commit, in registration order."""
    ROLLBACK_ONLY = "ROLLBACK_ONLY"
    """The transaction will not commit: drop the action."""
    REGISTRATION_FAILED = "REGISTRATION_FAILED"
    """The transaction may commit without the action: report it."""


@runtime_checkable
class AfterCommitRegistrar(Protocol):
    """Defers an action until the current transaction commits (wake-ups after enqueue)."""

    def register_after_commit(
        self, action: Callable[[], None], transaction: object | None = None
    ) -> AfterCommitResult:
        """``transaction`` is the handle the job was enqueued with (SQLAlchemy ``Connection``
        or ``Session``, a framework transaction), or None for the ambient one."""
        ...


__all__ = [
    "AfterCommitRegistrar",
    "AfterCommitResult",
    "BeanResolver",
    "ClusterCoordinator",
    "ExecutionTuningProvider",
    "ExecutorProvider",
    "JobLogger",
    "JobLoggerFactory",
    "ManagedBean",
    "MetricsCollector",
    "NodeIdentityProvider",
    "NodeTagAffinityProvider",
    "PollingDelayStrategy",
    "PollingStrategyProvider",
    "RatchetConfig",
    "RatchetConfigKey",
    "RatchetConfigSource",
    "SchedulerLifecycleHook",
    "SignalOutcome",
    "StartupCoordinator",
]
