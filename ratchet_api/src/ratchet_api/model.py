"""The job model: statuses, priorities, invocations, results and the small value types that
SPIs exchange. All classes are frozen attrs classes with keyword-only fields; use
``attrs.evolve`` to derive a changed copy. Datetimes are timezone-aware UTC.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import attrs


def utc_now() -> datetime:
    """Current time as an aware UTC datetime."""
    return datetime.now(UTC)


def require_utc(value: datetime | None, field: str) -> None:
    """Raise ``ValueError`` naming ``field`` unless ``value`` is None or an aware UTC datetime."""
    if value is None or value.tzinfo is UTC:  # the common cases first (bulk enqueue)
        return
    if value.tzinfo is None or value.utcoffset() != timedelta(0):
        raise ValueError(
            f"{field} must be a timezone-aware UTC datetime, got {value!r} "
            "(use datetime.now(timezone.utc) or .astimezone(timezone.utc))"
        )


def _utc_validator(_: object, attribute: attrs.Attribute[Any], value: datetime | None) -> None:
    require_utc(value, attribute.name)


class JobStatus(enum.StrEnum):
    """Where a job is in its life.

    PENDING jobs are due now or later; RUNNING jobs are claimed by a node; SUCCEEDED, FAILED (the
    dead letter) and CANCELLED are terminal; PAUSED jobs are held until resumed; AWAITING_SIGNAL
    jobs wait for a signal or its timeout; WAITING jobs wait for a parent (workflow step, batch
    callback).
    """

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    PAUSED = "PAUSED"
    AWAITING_SIGNAL = "AWAITING_SIGNAL"
    WAITING = "WAITING"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})
TERMINAL_STATUSES: frozenset[JobStatus] = _TERMINAL


MIN_PRIORITY = -100
"""The lowest job priority."""
MAX_PRIORITY = 100
"""The highest job priority."""


class JobPriority(enum.IntEnum):
    """Named points of the job priority range ``MIN_PRIORITY..MAX_PRIORITY`` (-100..100, the
    range of Django Tasks' priorities). A job's priority is any int of the range; higher values
    are claimed first, then earlier due times, then lower ids."""

    LOW = -50
    NORMAL = 0
    HIGH = 50
    CRITICAL = 100


def as_priority(value: int) -> int:
    """``value`` as a job priority: the ``JobPriority`` member when it is a named point (so
    ``.name`` works for them), else the int itself. ``ValueError`` for a value that is not an
    int (``bool`` included) of ``MIN_PRIORITY..MAX_PRIORITY``."""
    if isinstance(value, JobPriority):
        return value
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"priority must be an int, got {type(value).__name__} {value!r}")
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise ValueError(f"priority must be within {MIN_PRIORITY}..{MAX_PRIORITY}, got {value}")
    try:
        return JobPriority(value)
    except ValueError:
        return int(value)


def priority_label(value: int) -> str:
    """How a priority is shown: the lower-case name of a named point (``"high"``), else the
    number (``"42"``)."""
    return value.name.lower() if isinstance(value, JobPriority) else str(int(value))


class JobType(enum.StrEnum):
    """The kind of job, which decides how the engine finishes it."""

    STANDARD = "STANDARD"
    """A plain job: enqueued or scheduled."""
    RECURRING = "RECURRING"
    """An occurrence fired by a recurring (cron) definition."""
    BATCH_PARENT = "BATCH_PARENT"
    """The parent of a batch; completes when every child has finished."""
    BATCH_CHILD = "BATCH_CHILD"
    """One item of a batch."""
    WORKFLOW_STEP = "WORKFLOW_STEP"
    """A step that runs after its parent, subject to workflow conditions."""
    CALLBACK = "CALLBACK"
    """A success/failure/completion callback of a job or batch."""


class ExecutionKind(enum.StrEnum):
    """How a target is executed by the worker."""

    SYNC = "SYNC"
    """A plain function, run on the executor's thread pool."""
    ASYNC = "ASYNC"
    """An ``async def`` function, run on the worker's event loop."""


class ExceptionFamily(enum.StrEnum):
    """Coarse classification of a failure, used as a metrics tag."""

    TIMEOUT = "TIMEOUT"
    IO = "IO"
    VALIDATION = "VALIDATION"
    SECURITY = "SECURITY"
    STORE = "STORE"
    CIRCUIT_OPEN = "CIRCUIT_OPEN"
    APPLICATION = "APPLICATION"

    @classmethod
    def classify(cls, error: BaseException) -> ExceptionFamily:
        """Return the family of ``error`` (never raises)."""
        from ratchet_api import errors

        if isinstance(error, TimeoutError):
            return cls.TIMEOUT
        if isinstance(error, errors.CircuitBreakerOpenError):
            return cls.CIRCUIT_OPEN
        if isinstance(error, (errors.ClassNotAllowedError, PermissionError)):
            return cls.SECURITY
        if isinstance(error, errors.StoreError):
            return cls.STORE
        if isinstance(error, (OSError, ConnectionError)):
            return cls.IO
        if isinstance(error, (ValueError, TypeError)):
            return cls.VALIDATION
        return cls.APPLICATION


class BackoffKind(enum.StrEnum):
    FIXED = "FIXED"
    EXPONENTIAL = "EXPONENTIAL"


@attrs.frozen(kw_only=True)
class BackoffPolicy:
    """Delay between attempts of one job.

    FIXED waits ``initial`` every time; EXPONENTIAL waits ``initial * multiplier ** (attempt - 1)``
    capped at ``maximum``; with ``jitter`` the delay is drawn uniformly from [delay/2, delay].
    """

    kind: BackoffKind = BackoffKind.EXPONENTIAL
    initial: timedelta = timedelta(seconds=1)
    multiplier: float = 2.0
    maximum: timedelta = timedelta(minutes=10)
    jitter: bool = True

    def __attrs_post_init__(self) -> None:
        if self.initial < timedelta(0):
            raise ValueError(f"backoff initial delay must not be negative, got {self.initial}")
        if self.maximum < self.initial:
            raise ValueError(
                f"backoff maximum {self.maximum} must not be below initial {self.initial}"
            )
        if self.multiplier < 1.0:
            raise ValueError(f"backoff multiplier must be >= 1.0, got {self.multiplier}")

    @classmethod
    def fixed(cls, delay: timedelta | float) -> BackoffPolicy:
        d = delay if isinstance(delay, timedelta) else timedelta(seconds=delay)
        return cls(kind=BackoffKind.FIXED, initial=d, maximum=d, jitter=False)

    @classmethod
    def exponential(
        cls,
        initial: timedelta | float = 1.0,
        *,
        multiplier: float = 2.0,
        maximum: timedelta | float = 600.0,
        jitter: bool = True,
    ) -> BackoffPolicy:
        i = initial if isinstance(initial, timedelta) else timedelta(seconds=initial)
        m = maximum if isinstance(maximum, timedelta) else timedelta(seconds=maximum)
        return cls(
            kind=BackoffKind.EXPONENTIAL, initial=i, multiplier=multiplier, maximum=m, jitter=jitter
        )

    def base_delay(self, attempt: int) -> timedelta:
        """Delay before retry number ``attempt`` (1-based), without jitter."""
        if attempt < 1:
            raise ValueError(f"attempt must be >= 1, got {attempt}")
        if self.kind is BackoffKind.FIXED:
            return self.initial
        seconds = self.initial.total_seconds() * (self.multiplier ** min(attempt - 1, 64))
        return min(timedelta(seconds=min(seconds, 1e9)), self.maximum)


@attrs.frozen(kw_only=True)
class JobInvocation:
    """The persisted description of what a job runs.

    ``module`` and ``qualname`` locate the target (``pkg.mod`` and ``func`` or ``Cls.method``).
    ``static`` is false for a method of a container-provided class: the worker asks the
    ``BeanResolver`` for an instance of the class. ``signature`` is the parameter list recorded at
    enqueue (``"(a: int, b: str)"``) and re-checked at dispatch. ``args``/``kwargs`` are
    JSON-representable values (already converted by the ``PayloadSerializer``).
    """

    module: str
    qualname: str
    static: bool = True
    signature: str = ""
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def target(self) -> str:
        """``module:qualname``, the form the CLI and queries use."""
        return f"{self.module}:{self.qualname}"

    @property
    def owner_class(self) -> str | None:
        """Dotted name of the class owning the target, or None for a module-level function."""
        if "." not in self.qualname:
            return None
        return f"{self.module}.{self.qualname.rsplit('.', 1)[0]}"


@attrs.frozen(kw_only=True)
class LambdaDescriptor:
    """Result of ``LambdaAnalyzer.analyze``: where a callable lives and what it captured."""

    target_module: str
    qualname: str
    signature: str
    is_static: bool
    captured_args: tuple[Any, ...] = ()
    runtime_arg_indexes: tuple[int | None, ...] | None = None


@attrs.frozen(kw_only=True)
class SerializedJobResult:
    """A return value as stored on the job: JSON text (or None) plus the declared type name."""

    json: str | None
    type_name: str | None = None


@attrs.frozen(kw_only=True)
class JobResult:
    """The outcome of a finished job as read back by users, callbacks and workflow conditions."""

    job_id: UUID
    status: JobStatus
    value: Any = None
    error: str | None = None
    finished_at: datetime | None = attrs.field(default=None, validator=_utc_validator)

    @property
    def succeeded(self) -> bool:
        return self.status is JobStatus.SUCCEEDED


@attrs.frozen(kw_only=True)
class NodeIdentity:
    """Identity of a worker node: a stable id plus descriptive host, pid and tags."""

    node_id: str
    host: str = ""
    pid: int = 0
    tags: frozenset[str] = frozenset()


@attrs.frozen(kw_only=True)
class JobWakeupHint:
    """What a cluster wake-up carries: the priority of new work, who published it, its target."""

    priority: int
    source: NodeIdentity
    execution_target: str | None = None


@attrs.frozen(kw_only=True)
class NodeTagFilter:
    """Tags a node requires (every one) or refuses (any one) on the jobs it claims."""

    required: frozenset[str] = frozenset()
    excluded: frozenset[str] = frozenset()

    @property
    def is_empty(self) -> bool:
        return not self.required and not self.excluded


class EncryptionSurface(enum.StrEnum):
    """Which stored value an encryption call protects; bound into the AAD."""

    PAYLOAD = "PAYLOAD"
    """The stored invocation (target and arguments)."""
    RESULT = "RESULT"
    """The stored return value."""
    STATE = "STATE"
    """Versioned per-namespace state (the namespace is part of the context)."""
    ERROR = "ERROR"
    """The stored (sanitized) error message of a failed attempt."""
    SIGNAL_PAYLOAD = "SIGNAL_PAYLOAD"
    PREDICATE = "PREDICATE"


@attrs.frozen(kw_only=True)
class EncryptionContext:
    """Computed by the engine for every encrypt/decrypt call; applications never build one.

    ``associated_data()`` binds a ciphertext to its job, column and key so that a value copied to
    another row or field fails authentication.
    """

    job_id: UUID
    surface: EncryptionSurface
    key_id: str
    namespace: str = ""

    def associated_data(self) -> bytes:
        return (
            f"ratchet:v1:{self.job_id}:{self.surface.value}:{self.namespace}:{self.key_id}".encode()
        )


@attrs.frozen(kw_only=True)
class EncryptionKey:
    """Key material handed out by a ``KeyProvider``; ``material`` is raw key bytes."""

    key_id: str
    material: bytes = attrs.field(repr=False)
    algorithm: str = "AES-256-GCM"


@attrs.frozen(kw_only=True)
class MaskingContext:
    """Context of a masking decision: the owning job and its extension properties."""

    job_id: UUID
    job_properties: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class JobDetail:
    """The readable view of one job (``JobScheduler.detail``): arguments, result and error
    decoded and, for an encrypted job, decrypted; sensitive fields masked when payload masking
    is on (``masked``). ``unreadable`` explains a value that could not be opened (wrong or
    missing key, integrity violation): the corresponding fields are then None."""

    id: UUID
    status: JobStatus
    target: str
    priority: int
    """-100..100 (a ``JobPriority`` member for a named point)."""
    attempt: int
    max_retries: int
    tags: tuple[str, ...] = ()
    scheduled_at: datetime = attrs.field(validator=_utc_validator)
    created_at: datetime = attrs.field(validator=_utc_validator)
    started_at: datetime | None = attrs.field(default=None, validator=_utc_validator)
    finished_at: datetime | None = attrs.field(default=None, validator=_utc_validator)
    args: tuple[Any, ...] | None = None
    kwargs: Mapping[str, Any] | None = None
    result: Any = None
    error: str | None = None
    properties: Mapping[str, str] = attrs.field(factory=dict)
    encrypted: bool = False
    masked: bool = False
    unreadable: str | None = None


@attrs.frozen(kw_only=True)
class JobAuthorizationRequest:
    """What a ``JobAuthorizationPolicy`` decides on: the job about to be created (``job_id`` is
    the id it will get) or about to run. ``invocation`` carries the (decrypted) arguments;
    ``properties`` the job's properties (set on the builder at create time, read from the
    store at dispatch)."""

    job_id: UUID
    invocation: JobInvocation
    tags: tuple[str, ...] = ()
    properties: Mapping[str, str] = attrs.field(factory=dict)
    priority: int = JobPriority.NORMAL
    execution_target: str | None = None
    job_type: JobType = JobType.STANDARD

    @property
    def target(self) -> str:
        return self.invocation.target


@attrs.frozen(kw_only=True)
class VersionedState:
    """Per-job, per-namespace JSON state with its CAS version (0 after init)."""

    json: str
    version: int


class StateWriteResult(enum.StrEnum):
    """Outcome of a fenced state write."""

    UPDATED = "UPDATED"
    """The write applied."""
    VERSION_CONFLICT = "VERSION_CONFLICT"
    """Another writer changed the state first: re-read and retry."""
    SUPERSEDED = "SUPERSEDED"
    """The caller's claim is no longer current (job not RUNNING or claim sequence moved): stop."""


class CircuitBreakerProfile(enum.StrEnum):
    """Which breaker a configuration applies to."""

    JOB = "JOB"
    """Breakers around job targets (``@circuit_breaker(service=...)``)."""
    POLLER = "POLLER"
    """The breaker that guards the poller against a failing store."""


def _classes(
    value: Iterable[type[BaseException]],
) -> tuple[type[BaseException], ...]:
    """A copy as a tuple: a list mutated after construction does not change the config."""
    return tuple(value)


@attrs.frozen(kw_only=True)
class CircuitBreakerExceptionFilter:
    """Decides whether a failure counts against a circuit breaker.

    Class matching walks the cause chain (``__cause__``/``__context__``) with cycle detection and
    includes subclasses. Ignore matches win. With no record classes and no predicate every
    exception that is not ignored is recorded; otherwise only record-class matches or a predicate
    accepting the original exception count. A predicate that raises records the call as a failure
    (the predicate's error is attached to the original as a note).
    """

    record: tuple[type[BaseException], ...] = attrs.field(default=(), converter=_classes)
    ignore: tuple[type[BaseException], ...] = attrs.field(default=(), converter=_classes)
    predicate: Callable[[BaseException], bool] | None = None
    """Compared by identity: filters with different predicate callables are not equal."""

    def merge(self, other: CircuitBreakerExceptionFilter) -> CircuitBreakerExceptionFilter:
        """Union the class lists and OR the predicates."""
        mine, theirs = self.predicate, other.predicate
        pred: Callable[[BaseException], bool] | None
        if mine and theirs:

            def pred(exc: BaseException) -> bool:
                return mine(exc) or theirs(exc)

        else:
            pred = mine or theirs
        return CircuitBreakerExceptionFilter(
            record=tuple(dict.fromkeys(self.record + other.record)),
            ignore=tuple(dict.fromkeys(self.ignore + other.ignore)),
            predicate=pred,
        )

    @staticmethod
    def _chain(exc: BaseException) -> list[BaseException]:
        seen: list[BaseException] = []
        current: BaseException | None = exc
        while current is not None and not any(current is s for s in seen):
            seen.append(current)
            current = current.__cause__ or current.__context__
        return seen

    def _matches(self, exc: BaseException, classes: tuple[type[BaseException], ...]) -> bool:
        return bool(classes) and any(isinstance(e, classes) for e in self._chain(exc))

    def classify(self, exc: BaseException) -> bool | None:
        """True: count as failure; None: count as neither success nor failure."""
        if self._matches(exc, self.ignore):
            return None
        if not self.record and self.predicate is None:
            return True
        if self._matches(exc, self.record):
            return True
        if self.predicate is not None:
            try:
                if self.predicate(exc):
                    return True
            except Exception as pred_error:  # noqa: BLE001 - a failing predicate records
                exc.add_note(f"circuit breaker predicate failed: {pred_error!r}")
                return True
        return None


@attrs.frozen(kw_only=True)
class CircuitBreakerConfig:
    """Settings of one count-based sliding-window circuit breaker."""

    failure_rate_threshold: float = 50.0
    sliding_window_size: int = 20
    wait_duration_ms: int = 30_000
    permitted_calls_in_half_open: int = 3
    minimum_calls: int = 10
    record_exceptions: tuple[type[BaseException], ...] = attrs.field(default=(), converter=_classes)
    ignore_exceptions: tuple[type[BaseException], ...] = attrs.field(default=(), converter=_classes)
    record_predicate: Callable[[BaseException], bool] | None = None
    """Compared by identity: configs with different predicate callables are not equal."""

    def __attrs_post_init__(self) -> None:
        if not 0 < self.failure_rate_threshold <= 100:
            raise ValueError("failure_rate_threshold must be in (0, 100]")
        for name in ("sliding_window_size", "permitted_calls_in_half_open", "minimum_calls"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.wait_duration_ms < 0:
            raise ValueError("wait_duration_ms must not be negative")

    def exception_filter(self) -> CircuitBreakerExceptionFilter:
        return CircuitBreakerExceptionFilter(
            record=self.record_exceptions,
            ignore=self.ignore_exceptions,
            predicate=self.record_predicate,
        )


class ThreadingMode(enum.StrEnum):
    """How the worker runs synchronous jobs."""

    THREADS = "THREADS"
    """A bounded thread pool (the default)."""
    INLINE = "INLINE"
    """On the poller thread, one at a time (tests, debugging)."""


@attrs.frozen(kw_only=True)
class PollingConfig:
    """Inputs of the adaptive polling delay."""

    min_interval: timedelta = timedelta(milliseconds=50)
    max_interval: timedelta = timedelta(seconds=2)
    backoff_factor: float = 2.0


@attrs.frozen(kw_only=True)
class JobLoggerContext:
    """What a ``JobLoggerFactory`` knows about the execution it creates a logger for."""

    job_id: UUID
    target: str
    attempt: int
    node_id: str
    job_type: JobType = JobType.STANDARD


__all__ = [
    "MAX_PRIORITY",
    "MIN_PRIORITY",
    "TERMINAL_STATUSES",
    "BackoffKind",
    "BackoffPolicy",
    "CircuitBreakerConfig",
    "CircuitBreakerExceptionFilter",
    "CircuitBreakerProfile",
    "EncryptionContext",
    "EncryptionKey",
    "EncryptionSurface",
    "ExceptionFamily",
    "ExecutionKind",
    "JobAuthorizationRequest",
    "JobDetail",
    "JobInvocation",
    "JobLoggerContext",
    "JobPriority",
    "JobResult",
    "JobStatus",
    "JobType",
    "JobWakeupHint",
    "LambdaDescriptor",
    "MaskingContext",
    "NodeIdentity",
    "NodeTagFilter",
    "PollingConfig",
    "SerializedJobResult",
    "StateWriteResult",
    "ThreadingMode",
    "VersionedState",
    "as_priority",
    "priority_label",
    "require_utc",
    "utc_now",
]
