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

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

import attrs

from ratchet_api.errors import InvalidJobError
from ratchet_api.model import BackoffPolicy, JobInvocation, JobPriority
from ratchet_api.store.entities import MAX_KEY_LENGTH, MAX_TAG_LENGTH
from ratchet_core.flow_control import FlowSpec, check_flow_key, check_permits, check_rate

if TYPE_CHECKING:
    from ratchet_core.scheduler import SchedulerService

MAX_RETRIES_LIMIT = 1000


@attrs.define(kw_only=True)
class JobOptions:
    """Validated options of one job (everything but target and arguments)."""

    priority: JobPriority = JobPriority.NORMAL
    tags: tuple[str, ...] = ()
    max_retries: int | None = None
    backoff: BackoffPolicy | None = None
    idempotency_key: str | None = None
    execution_target: str | None = None
    run_at: datetime | None = None
    delay: timedelta | None = None
    transaction: object | None = None
    resource_key: str | None = None
    flow: FlowSpec = attrs.field(factory=FlowSpec)


def _bad(option: str, message: str) -> InvalidJobError:
    return InvalidJobError(f"job option {option!r}: {message}")


def parse_priority(value: JobPriority | int | str) -> JobPriority:
    """A ``JobPriority`` from itself, its int value (0, 5, 10, 15) or its name (``"high"``)."""
    if isinstance(value, JobPriority):
        return value
    if isinstance(value, str) and not value.strip().lstrip("-").isdigit():
        try:
            return JobPriority[value.strip().upper()]
        except KeyError:
            pass
    elif isinstance(value, (int, str)) and not isinstance(value, bool):
        try:
            return JobPriority(int(value))
        except ValueError:
            pass
    names = ", ".join(f"{p.name.lower()} ({p.value})" for p in JobPriority)
    raise _bad("priority", f"{value!r} is not a priority; use one of {names}")


def check_tags(tags: tuple[Any, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for tag in tags:
        if not isinstance(tag, str) or not tag.strip():
            raise _bad("tags", f"every tag must be a non-empty string, got {tag!r}")
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
    return value


def check_delay(value: Any) -> timedelta:
    if isinstance(value, bool) or not isinstance(value, (int, float, timedelta)):
        raise _bad("delay", f"expected seconds or a timedelta, got {value!r}")
    delay = value if isinstance(value, timedelta) else timedelta(seconds=float(value))
    if delay < timedelta(0):
        raise _bad("delay", f"must not be negative, got {value!r}")
    return delay


def check_at(value: Any) -> datetime:
    if not isinstance(value, datetime):
        raise _bad("at", f"expected a datetime, got {value!r}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise _bad(
            "at",
            f"{value.isoformat()} is naive; pass a timezone-aware datetime "
            "(for example datetime(2030, 1, 1, tzinfo=timezone.utc))",
        )
    return value.astimezone(UTC)


class DefaultJobBuilder:
    """Collects a job's target, arguments and options; ``enqueue()`` creates it."""

    def __init__(
        self,
        scheduler: SchedulerService,
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

    def priority(self, priority: JobPriority | int | str) -> DefaultJobBuilder:
        self._options.priority = parse_priority(priority)
        return self

    def tags(self, *tags: str) -> DefaultJobBuilder:
        """Tags to find the job by (added to earlier ones; each at most 128 characters)."""
        self._options.tags = check_tags(self._options.tags + tuple(tags))
        return self

    def max_retries(self, retries: int) -> DefaultJobBuilder:
        """Retries after the first attempt before the job goes to the dead letter (0 = none)."""
        self._options.max_retries = check_max_retries(retries)
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

    def resource(self, key: str, *, permits: int) -> DefaultJobBuilder:
        """At most ``permits`` jobs holding resource ``key`` run at once across every worker
        (see :mod:`ratchet_core.flow_control`)."""
        self._options.resource_key = check_flow_key("resource", key)
        self._options.flow = attrs.evolve(self._options.flow, permits=check_permits(permits))
        return self

    def rate_limit(self, key: str, limit: int, *, per: timedelta | float) -> DefaultJobBuilder:
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

    def transaction(self, transaction: object | None) -> DefaultJobBuilder:
        """Write the job inside the caller's open transaction (a SQLAlchemy ``Connection`` or
        ``Session``, a pymongo ``ClientSession``): rollback removes it, wake-ups wait for commit."""
        self._options.transaction = transaction
        return self

    def enqueue(self) -> UUID:
        """Validate the target and arguments and store the job; returns its id (the first job's
        id when the idempotency key was used before)."""
        if self._used:
            raise InvalidJobError("this job builder was already enqueued; start a new one")
        self._used = True
        if self._invocation is not None:
            return self._scheduler._submit_invocation(self._invocation, self._options)
        assert self._target is not None
        return self._scheduler._submit(self._target, self._args, self._kwargs, self._options)

    def _require_target(self, option: str) -> None:
        if self._invocation is not None:
            raise _bad(option, "the arguments of a prepared JobInvocation cannot be changed")


__all__ = ["DefaultJobBuilder", "JobOptions", "parse_priority"]
