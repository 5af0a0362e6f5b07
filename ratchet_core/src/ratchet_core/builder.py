"""The fluent job builder returned by ``SchedulerService.job(fn)``::

    job_id = (
        scheduler.job(send_invoice)
        .args(order_id)
        .priority(JobPriority.HIGH)
        .tags("billing")
        .max_retries(5)
        .backoff(BackoffPolicy.exponential(2.0))
        .idempotency_key(f"invoice-{order_id}")
        .delay(timedelta(minutes=5))
        .transaction(session)
        .enqueue()
    )

Every option is validated when it is set and raises ``InvalidJobError`` naming the option; the
target and its arguments are validated by ``enqueue()``. A builder is single-use and not thread
safe.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, Self
from uuid import UUID

import attrs

from ratchet_api.errors import InvalidJobError
from ratchet_api.model import (
    MAX_PRIORITY,
    MIN_PRIORITY,
    BackoffPolicy,
    JobInvocation,
    JobPriority,
    as_priority,
)
from ratchet_api.store.entities import MAX_KEY_LENGTH, MAX_TAG_LENGTH, ConditionKind
from ratchet_api.workflow import Condition, SignalTimeout
from ratchet_core.flow_control import FlowSpec, check_flow_key, check_permits, check_rate
from ratchet_core.limits import check_delay_seconds, check_schedule_time, check_text
from ratchet_core.properties import check_property

if TYPE_CHECKING:
    from ratchet_api.store.protocols import JobStore
    from ratchet_core.codec import PayloadCodec
    from ratchet_core.workflow.plan import Target, WorkflowPlan

MAX_RETRIES_LIMIT = 1000


class JobSubmitter(Protocol):
    """What a builder needs of the scheduler: submit a job with its options (the builder does
    not import the scheduler; the scheduler implements this)."""

    def submit_job(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any],
        kwargs: dict[str, Any],
        options: JobOptions,
    ) -> UUID:
        """Resolve ``fn`` with its arguments and store the job; its id."""
        ...

    def submit_job_invocation(self, invocation: JobInvocation, options: JobOptions) -> UUID:
        """Validate and store an already resolved invocation; its id."""
        ...

    def resolve_job(
        self, fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]
    ) -> JobInvocation:
        """The validated invocation of ``fn`` with these arguments (nothing stored)."""
        ...

    def check_job_invocation(self, invocation: JobInvocation) -> JobInvocation:
        """``invocation`` after the checks a worker applies at dispatch (nothing stored)."""
        ...

    def workflow_plan(self) -> WorkflowPlan:
        """A new plan for the steps and callbacks of a workflow (docs/workflows.md)."""
        ...

    @property
    def store(self) -> JobStore:
        """The job store (job properties need its ``JobExtensionStore`` capability)."""
        ...

    @property
    def codec(self) -> PayloadCodec:
        """Seals the payloads of encrypted jobs."""
        ...


@attrs.define(kw_only=True)
class JobOptions:
    """Validated options of one job (everything but target and arguments)."""

    priority: int = JobPriority.NORMAL
    tags: tuple[str, ...] = ()
    max_retries: int | None = None
    backoff: BackoffPolicy | None = None
    idempotency_key: str | None = None
    execution_target: str | None = None
    run_at: datetime | None = None
    delay: timedelta | None = None
    transaction: object | None = None
    encrypted: bool = False
    properties: tuple[tuple[str, str], ...] = ()
    resource_key: str | None = None
    flow: FlowSpec = attrs.field(factory=FlowSpec)


def _bad(option: str, message: str) -> InvalidJobError:
    return InvalidJobError(f"job option {option!r}: {message}")


def parse_priority(value: JobPriority | int | str) -> int:
    """A job priority from a ``JobPriority``, an int of ``MIN_PRIORITY..MAX_PRIORITY``
    (-100..100; higher runs first), its text (``"42"``) or a name (``"high"``). Named points
    come back as ``JobPriority`` members."""
    if isinstance(value, str) and not value.strip().lstrip("-").isdigit():
        try:
            return JobPriority[value.strip().upper()]
        except KeyError:
            pass
    elif isinstance(value, (int, str)) and not isinstance(value, bool):
        try:
            return as_priority(int(value))
        except ValueError:
            pass
    names = ", ".join(f"{p.name.lower()} ({p.value})" for p in JobPriority)
    raise _bad(
        "priority",
        f"{value!r} is not a priority; use an int from {MIN_PRIORITY} to {MAX_PRIORITY} "
        f"(higher runs first) or a name: {names}",
    )


def check_tags(tags: tuple[Any, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for tag in tags:
        if not isinstance(tag, str) or not tag.strip():
            raise _bad("tags", f"every tag must be a non-empty string, got {tag!r}")
        check_text("tags", tag)  # NUL bytes and lone surrogates (ratchet_core.limits)
        if len(tag) > MAX_TAG_LENGTH:
            raise _bad(
                "tags",
                f"tag {tag[:30]!r}... is {len(tag)} characters, the limit is {MAX_TAG_LENGTH}",
            )
        out.append(tag)
    return tuple(dict.fromkeys(out))


def check_max_retries(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad("max_retries", f"must be an integer, got {value!r}")
    if value < 0:
        raise _bad("max_retries", f"must not be negative, got {value}")
    if value > MAX_RETRIES_LIMIT:
        raise _bad("max_retries", f"must be at most {MAX_RETRIES_LIMIT}, got {value}")
    return value


def check_backoff(value: Any) -> BackoffPolicy | None:
    if value is None or isinstance(value, BackoffPolicy):
        return value
    if isinstance(value, (int, float, timedelta)) and not isinstance(value, bool):
        seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
        if not seconds >= 0:  # negative or NaN
            raise _bad("backoff", f"a fixed delay must not be negative, got {value!r}")
        return BackoffPolicy.fixed(seconds)
    raise _bad(
        "backoff",
        f"expected a BackoffPolicy (BackoffPolicy.fixed(...) or .exponential(...)) or a fixed "
        f"delay in seconds, got {value!r}",
    )


def check_key(option: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _bad(option, f"must be a non-empty string, got {value!r}")
    if len(value) > MAX_KEY_LENGTH:
        raise _bad(option, f"is {len(value)} characters, the limit is {MAX_KEY_LENGTH}")
    return check_text(option, value)  # NUL bytes and lone surrogates (ratchet_core.limits)


def check_delay(value: Any) -> timedelta:
    if isinstance(value, bool) or not isinstance(value, (int, float, timedelta)):
        raise _bad("delay", f"expected seconds or a timedelta, got {value!r}")
    return check_delay_seconds("delay", value)  # NaN, infinite, out of range: limits.py


def check_at(value: Any) -> datetime:
    if not isinstance(value, datetime):
        raise _bad("at", f"expected a datetime, got {value!r}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise _bad(
            "at",
            f"{value.isoformat()} is naive; pass a timezone-aware datetime "
            "(for example datetime(2030, 1, 1, tzinfo=timezone.utc))",
        )
    return check_schedule_time("at", value)  # out of range: limits.py


class JobOptionSetters:
    """The option setters shared by every builder that creates jobs: ``DefaultJobBuilder`` (one
    job) and the batch builders (every child). Each validates its value when it is set
    (``InvalidJobError`` naming the option) and records it in the builder's ``JobOptions``."""

    _options: JobOptions

    def priority(self, priority: JobPriority | int | str) -> Self:
        """An int from -100 to 100 (higher runs first), a ``JobPriority`` or its name."""
        self._options.priority = parse_priority(priority)
        return self

    def tags(self, *tags: str) -> Self:
        """Tags to find the job by (added to earlier ones; each at most 128 characters)."""
        self._options.tags = check_tags(self._options.tags + tuple(tags))
        return self

    def max_retries(self, retries: int) -> Self:
        """Retries after the first attempt before the job goes to the dead letter (0 = none)."""
        self._options.max_retries = check_max_retries(retries)
        return self

    def resource(self, key: str, *, permits: int) -> Self:
        """At most ``permits`` jobs holding resource ``key`` run at once across every worker
        (see :mod:`ratchet_core.flow_control`)."""
        self._options.resource_key = check_flow_key("resource", key)
        self._options.flow = attrs.evolve(self._options.flow, permits=check_permits(permits))
        return self

    def rate_limit(self, key: str, limit: int, *, per: timedelta | float) -> Self:
        """At most ``limit`` jobs with rate-limit ``key`` start per ``per`` (a timedelta or
        seconds) across every worker."""
        count, seconds = check_rate(limit, per)
        self._options.flow = attrs.evolve(
            self._options.flow,
            rate_key=check_flow_key("rate_limit", key),
            rate_limit=count,
            rate_per=seconds,
        )
        return self

    def transaction(self, transaction: object | None) -> Self:
        """Write inside the caller's open transaction (a SQLAlchemy ``Connection`` or
        ``Session``, a pymongo ``ClientSession``): rollback removes it, wake-ups wait for commit."""
        self._options.transaction = transaction
        return self


class DefaultJobBuilder(JobOptionSetters):
    """Collects a job's target, arguments and options; ``enqueue()`` creates it."""

    def __init__(
        self,
        scheduler: JobSubmitter,
        target: Callable[..., Any] | None = None,
        invocation: JobInvocation | None = None,
    ) -> None:
        self._scheduler = scheduler
        self._target = target
        self._invocation = invocation
        self._args: tuple[Any, ...] = ()
        self._kwargs: dict[str, Any] = {}
        self._options = JobOptions()
        self._used = False
        self._plan: WorkflowPlan | None = None
        self._ids: list[UUID] = []

    def args(self, *args: Any) -> DefaultJobBuilder:
        """Positional arguments of the target (replaces earlier ones)."""
        self._require_target("args")
        self._args = args
        return self

    def kwargs(self, **kwargs: Any) -> DefaultJobBuilder:
        """Keyword arguments of the target (merged with earlier ones)."""
        self._require_target("kwargs")
        self._kwargs.update(kwargs)
        return self

    def backoff(self, policy: BackoffPolicy | float | timedelta | None) -> DefaultJobBuilder:
        """Delay between attempts: a ``BackoffPolicy`` or a fixed delay in seconds."""
        self._options.backoff = check_backoff(policy)
        return self

    def idempotency_key(self, key: str) -> DefaultJobBuilder:
        """Enqueueing again with the same key returns the first job's id (no second job)."""
        self._options.idempotency_key = check_key("idempotency_key", key)
        return self

    def execution_target(self, label: str) -> DefaultJobBuilder:
        """Only workers serving this execution target claim the job."""
        self._options.execution_target = check_key("execution_target", label)
        return self

    def delay(self, delay: float | timedelta) -> DefaultJobBuilder:
        """Run no earlier than ``delay`` (seconds or a timedelta) from now."""
        self._options.delay = check_delay(delay)
        self._options.run_at = None
        return self

    def at(self, when: datetime) -> DefaultJobBuilder:
        """Run no earlier than ``when`` (timezone-aware)."""
        self._options.run_at = check_at(when)
        self._options.delay = None
        return self

    # ------------------------------------------------------------ workflows (docs/workflows.md)

    def _workflow(self) -> WorkflowPlan:
        if self._plan is None:
            self._plan = self._scheduler.workflow_plan()
        return self._plan

    def then(self, fn: Target, /, *args: Any, **kwargs: Any) -> DefaultJobBuilder:
        """Add a step that runs ``fn(*args, **kwargs)`` after the current step succeeded, and
        make it the current step (a ``ParentResult[T]`` parameter receives the result)."""
        self._workflow().then(fn, args, kwargs)
        return self

    def on_success(self, fn: Target, /, *args: Any, **kwargs: Any) -> DefaultJobBuilder:
        """A callback job that runs when the current step succeeded."""
        self._workflow().callback("on_success", ConditionKind.ON_SUCCESS, fn, args, kwargs)
        return self

    def on_failure(self, fn: Target, /, *args: Any, **kwargs: Any) -> DefaultJobBuilder:
        """A callback job that runs when the current step went to the dead letter (a
        ``ParentError`` parameter receives its sanitized error)."""
        self._workflow().callback("on_failure", ConditionKind.ON_FAILURE, fn, args, kwargs)
        return self

    def branch(
        self,
        condition: Condition,
        *,
        if_true: Target | None = None,
        if_false: Target | None = None,
    ) -> DefaultJobBuilder:
        """After the current step succeeded, run ``if_true`` when ``condition`` holds on its
        result, else ``if_false`` (a function or a ``Step``); the other side is cancelled. Ends
        the chain."""
        self._workflow().branch(condition, if_true, if_false)
        return self

    def await_signal(
        self,
        key: str,
        *,
        timeout: float | timedelta | None = None,
        on_timeout: SignalTimeout | str = SignalTimeout.FAIL,
    ) -> DefaultJobBuilder:
        """The current step waits for ``scheduler.signal(key or its id, payload)`` before it
        runs (a step after its parent is released); after ``timeout`` it fails, is cancelled or
        runs without a payload, as ``on_timeout`` says."""
        self._workflow().await_signal(key, timeout, on_timeout)
        return self

    @property
    def job_ids(self) -> list[UUID]:
        """After ``enqueue``: the ids of every job it created, root first, in declaration
        order (only the existing root's id when its idempotency key was used before)."""
        return list(self._ids)

    def encrypted(self) -> DefaultJobBuilder:
        """Encrypt this job's arguments, result, errors and state at rest (see
        docs/security.md). ``InvalidJobError`` when no encryption keys are configured."""
        self._scheduler.codec.require_available("encrypted")
        self._options.encrypted = True
        return self

    def property(self, name: str, value: str) -> DefaultJobBuilder:
        """A write-once, plaintext, indexed property of the job (for queries and the masking
        policy, e.g. ``.property("ratchet.mask_fields", "iban")``). Needs the store's
        ``JobExtensionStore`` capability."""
        prop = check_property(self._scheduler.store, self._options.properties, name, value)
        self._options.properties = (*self._options.properties, prop)
        return self

    def enqueue(self) -> UUID:
        """Validate the target and arguments and store the job (and its workflow); returns its
        id (the first job's id when the idempotency key was used before)."""
        if self._used:
            raise InvalidJobError("this job builder was already enqueued; start a new one")
        self._used = True
        scheduler = self._scheduler
        if self._plan is not None:
            if self._invocation is not None:
                root = scheduler.check_job_invocation(self._invocation)
            else:
                assert self._target is not None
                root = scheduler.resolve_job(self._target, self._args, self._kwargs)
            self._ids = self._plan.enqueue(root, self._options)
            return self._ids[0]
        if self._invocation is not None:
            job_id = scheduler.submit_job_invocation(self._invocation, self._options)
        else:
            assert self._target is not None
            job_id = scheduler.submit_job(self._target, self._args, self._kwargs, self._options)
        self._ids = [job_id]
        return job_id

    def _require_target(self, option: str) -> None:
        if self._invocation is not None:
            raise _bad(option, "the arguments of a prepared JobInvocation cannot be changed")


__all__ = ["DefaultJobBuilder", "JobOptionSetters", "JobOptions", "parse_priority"]
