"""Runtime SPIs: configuration, execution, polling, logging, metrics, cluster, lifecycle,
bean resolution and transactions."""

from __future__ import annotations

import enum
import os
import socket
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
from ratchet_api.spi._optional import optional_member

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
    execution target label a job names. Both members are required.

    The Java original's ``virtualThreadLimit(type, default)`` (backpressure on virtual-thread
    jobs) is ``max_concurrency("async", default)`` here: ``async def`` jobs are this port's
    lightweight tasks, and that limit bounds how many run at once on a node."""

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
    ``shutdown`` on stop. ``job_executor`` is required.

    The Java original's ``getScheduledExecutor`` has no counterpart: the worker's timers
    (polling, heartbeats, recovery, the completion writer) each run on a dedicated thread of
    the worker that waits on its own condition, so there is no shared scheduled pool to
    replace; their periods are configuration (``worker.poll_interval``,
    ``worker.heartbeat_interval``, ``worker.recovery_interval``)."""

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
    fast, thread safe and must never raise.

    Required: the first ten callbacks (``job_started`` ... ``local_wakeup``). The others are
    optional and default to doing nothing, so a collector written for fewer callbacks keeps
    working when callbacks are added. ``ratchet_core.defaults.metrics.NoOpMetricsCollector`` is
    a base class that implements all of them as no-ops."""

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

    @optional_member
    def execution_target_fallback(self, requested: str, used: str) -> None:
        return None

    @optional_member
    def cluster_wakeup_published(self, node_id: str, execution_target: str) -> None:
        return None

    @optional_member
    def cluster_wakeup_received(self, node_id: str, execution_target: str) -> None:
        return None

    @optional_member
    def callback_failed(
        self, job_id: UUID, job_type: JobType, cause: BaseException, attempt: int
    ) -> None:
        return None

    @optional_member
    def signal_waiting(self, job_id: UUID, job_type: JobType, signal_key: str) -> None:
        return None

    @optional_member
    def signal_delivered(
        self, job_id: UUID, job_type: JobType, signal_key: str, outcome: SignalOutcome
    ) -> None:
        return None

    @optional_member
    def signal_timed_out(self, job_id: UUID, job_type: JobType, signal_key: str) -> None:
        return None

    @optional_member
    def signal_cancelled(self, job_id: UUID, job_type: JobType, signal_key: str) -> None:
        return None

    @optional_member
    def store_operation(self, store: str, operation: str, outcome: str, duration_ms: int) -> None:
        return None

    @optional_member
    def poller_breaker_state(self, poller: str, state: str) -> None:
        return None

    @optional_member
    def circuit_breaker_state(self, service: str, old_state: str, new_state: str) -> None:
        return None

    @optional_member
    def encryption_integrity_violation(self, job_id: UUID, surface: str) -> None:
        return None

    @optional_member
    def encryption_envelope_version_skew(self, job_id: UUID, found: int, expected: int) -> None:
        return None


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
    """This node's identity, constant for the life of the process. Required: ``get_node_id``
    (unique and immutable for the node's life). Optional: ``identity``."""

    def get_node_id(self) -> str: ...

    @optional_member
    def identity(self) -> NodeIdentity:
        """The full identity. Default: ``get_node_id()`` with this host's name and process id,
        no tags."""
        return NodeIdentity(
            node_id=self.get_node_id(), host=socket.gethostname() or "localhost", pid=os.getpid()
        )


@runtime_checkable
class NodeTagAffinityProvider(Protocol):
    """Which jobs this node claims, by tag. The default filter is empty (claim anything)."""

    def tag_filter(self) -> NodeTagFilter: ...


# ---------------------------------------------------------------- lifecycle and beans


@runtime_checkable
class SchedulerLifecycleHook(Protocol):
    """Called around worker start and stop, in registration order. A hook that raises in
    ``before_start`` aborts the start; errors in the others are logged. Every method is
    optional (default: do nothing): a hook implements only those it needs."""

    @optional_member
    def before_start(self) -> None:
        return None

    @optional_member
    def after_start(self) -> None:
        return None

    @optional_member
    def before_stop(self) -> None:
        return None

    @optional_member
    def after_stop(self) -> None:
        return None


class ManagedBean(AbstractContextManager[Any], Protocol):
    """An invocation-scoped instance; closing it releases a dependent (factory) instance."""

    @property
    def instance(self) -> Any: ...

    def close(self) -> None: ...


@attrs.frozen
class SharedBean:
    """A ``ManagedBean`` for a shared (singleton) instance: closing it does nothing. What
    ``BeanResolver.acquire`` returns by default."""

    instance: Any

    def close(self) -> None:
        return None

    def __enter__(self) -> SharedBean:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@runtime_checkable
class BeanResolver(Protocol):
    """Resolves instances of classes for non-static job targets. Required: ``resolve``.
    Optional: ``validate_resolvable`` and ``acquire``, whose defaults build on ``resolve``
    (enough for a resolver that only hands out shared instances)."""

    def resolve(self, cls: type[T]) -> T:
        """An instance of ``cls``; ``LookupError`` if the container cannot provide one."""
        ...

    @optional_member
    def validate_resolvable(self, cls: type[Any]) -> None:
        """Raise ``LookupError`` now (at enqueue) if ``cls`` cannot be resolved later.
        Default: acquire an instance and release it."""
        self.acquire(cls).close()

    @optional_member
    def acquire(self, cls: type[Any]) -> ManagedBean:
        """An invocation-scoped handle; the worker always closes it after the call. Default:
        ``resolve(cls)`` in a handle whose ``close`` does nothing (``SharedBean``)."""
        return SharedBean(self.resolve(cls))


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
    "SharedBean",
    "SignalOutcome",
    "StartupCoordinator",
]
