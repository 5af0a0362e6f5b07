"""Job options and their checks, shared by every authoring module (the job builder, the
batch builders, workflow plans) and the enqueue pipeline: :class:`JobOptions` (everything of a
job but its target and arguments) and :class:`JobOptionSetters` (the fluent setters that
validate each option when it is set and raise ``InvalidJobError`` naming it)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Self

import attrs

from ratchet_api.errors import InvalidJobError
from ratchet_api.model import MAX_PRIORITY, MIN_PRIORITY, BackoffPolicy, JobPriority, as_priority
from ratchet_api.store.entities import MAX_KEY_LENGTH, MAX_TAG_LENGTH
from ratchet_core.features.flow_control import FlowSpec, check_flow_key, check_permits, check_rate
from ratchet_core.payload.limits import check_delay_seconds, check_schedule_time, check_text

MAX_RETRIES_LIMIT = 1000


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
    fairness_key: str | None = None
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
        check_text("tags", tag)  # NUL bytes and lone surrogates (ratchet_core.payload.limits)
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
    return check_text(option, value)  # NUL bytes and lone surrogates (ratchet_core.payload.limits)


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

    def fairness_key(self, key: str) -> Self:
        """The group the job is claimed fairly within, e.g. a tenant (at most 255 characters):
        on a store with ``FairClaimStore`` claims interleave the keys of due jobs of equal
        priority, so one key's backlog does not delay the others (docs/scaling.md)."""
        self._options.fairness_key = check_key("fairness_key", key)
        return self

    def resource(self, key: str, *, permits: int) -> Self:
        """At most ``permits`` jobs holding resource ``key`` run at once across every worker
        (see :mod:`ratchet_core.features.flow_control`)."""
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


__all__ = [
    "MAX_RETRIES_LIMIT",
    "JobOptionSetters",
    "JobOptions",
    "check_at",
    "check_backoff",
    "check_delay",
    "check_key",
    "check_max_retries",
    "check_tags",
    "parse_priority",
]
