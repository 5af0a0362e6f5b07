"""Store entities: what a store persists. Frozen attrs classes; stores map them to rows or
documents with their own converters. Datetimes are aware UTC; stores must preserve at least
millisecond precision and must keep ordering and equality correct at the precision they store
(the TCK compares at millisecond precision).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import attrs

from ratchet_api.ids import uuid7
from ratchet_api.model import (
    JobPriority,
    JobStatus,
    JobType,
    as_priority,
    require_utc,
    utc_now,
)

MAX_TAG_LENGTH = 128
"""Longest tag a store must accept; longer tags are refused with ``StoreDataError``."""
MAX_KEY_LENGTH = 255
"""Longest idempotency key, signal key, resource key, lock name, property key or namespace."""


def _utc(_: object, attribute: attrs.Attribute[Any], value: datetime | None) -> None:
    require_utc(value, attribute.name)


def _tags(_: object, attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    for tag in value:
        if not isinstance(tag, str) or not tag:
            raise ValueError(f"tags: every tag must be a non-empty string, got {tag!r}")
        if len(tag) > MAX_TAG_LENGTH:
            raise ValueError(
                f"tags: tag {tag[:20]!r}... is {len(tag)} characters, the limit is {MAX_TAG_LENGTH}"
            )


def _key(_: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and len(value) > MAX_KEY_LENGTH:
        raise ValueError(
            f"{attribute.name} is {len(value)} characters, the limit is {MAX_KEY_LENGTH}"
        )


def _str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    """Converter for tag fields; typed so that mypy accepts any iterable of str."""
    return tuple(value)


def _non_negative(_: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must not be negative, got {value}")


@attrs.frozen(kw_only=True)
class JobEntity:
    """One job as stored.

    ``payload`` is the serialized (possibly encrypted) invocation; ``target`` is its
    ``module:qualname`` kept in clear for queries. ``attempt`` counts claims (it is incremented by
    every claim, so an attempt lost to a crash while the job ran still counts); a claim given
    back or recovered before the worker started the job (``dispatched_at`` still None) is not
    counted. ``dispatched_at`` is set by ``JobClaimStore.mark_dispatched`` when the worker starts
    running the current claim, and cleared by the next claim. ``claim_seq`` is the fencing token:
    it is incremented by every claim and every fenced write must present the current value.
    ``backoff`` is the JSON form of the job's ``BackoffPolicy`` (None: the engine default).
    ``workflow`` is engine-owned JSON about the job's place in a workflow (whether jobs wait for
    it, its signal timeout and timeout action); None for a job outside any workflow.
    """

    id: UUID = attrs.field(factory=uuid7)
    status: JobStatus = JobStatus.PENDING
    priority: int = attrs.field(default=JobPriority.NORMAL, converter=as_priority)
    job_type: JobType = JobType.STANDARD
    target: str = ""
    payload: str = "{}"
    scheduled_at: datetime = attrs.field(factory=utc_now, validator=_utc)
    created_at: datetime = attrs.field(factory=utc_now, validator=_utc)
    updated_at: datetime = attrs.field(factory=utc_now, validator=_utc)
    started_at: datetime | None = attrs.field(default=None, validator=_utc)
    finished_at: datetime | None = attrs.field(default=None, validator=_utc)
    attempt: int = attrs.field(default=0, validator=_non_negative)
    max_retries: int = attrs.field(default=3, validator=_non_negative)
    backoff: str | None = None
    claim_seq: int = attrs.field(default=0, validator=_non_negative)
    owner: str | None = None
    heartbeat_at: datetime | None = attrs.field(default=None, validator=_utc)
    idempotency_key: str | None = attrs.field(default=None, validator=_key)
    execution_target: str | None = None
    tags: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple, validator=_tags)
    result: str | None = None
    last_error: str | None = None
    parent_id: UUID | None = None
    batch_id: UUID | None = None
    signal_key: str | None = attrs.field(default=None, validator=_key)
    signal_deadline: datetime | None = attrs.field(default=None, validator=_utc)
    signal_payload: str | None = None
    resource_key: str | None = attrs.field(default=None, validator=_key)
    recurring_name: str | None = None
    dispatched_at: datetime | None = attrs.field(default=None, validator=_utc)
    workflow: str | None = None
    flow_control: str | None = None
    """The job's flow-control options as JSON written by the engine (permit count of
    ``resource_key``, rate limit); None for a job without any."""
    fairness_key: str | None = attrs.field(default=None, validator=_key)
    """The group the job is claimed fairly within (e.g. a tenant): a store with
    ``FairClaimStore`` interleaves the keys of due jobs of equal priority, so one key's
    backlog does not delay the others. None: the job belongs to the unkeyed group."""


@attrs.frozen(kw_only=True)
class Completion:
    """A fenced success write for ``JobTerminalStore.mark_succeeded_many``."""

    job_id: UUID
    claim_seq: int
    result: str | None = None


class FailureWrite(enum.StrEnum):
    """What a fenced failure write of ``WorkerBatchStore.write_failures`` does."""

    RETRY = "RETRY"
    """RUNNING -> PENDING due at ``run_at`` with ``last_error``, owner cleared (as
    ``JobRetryStore.schedule_retry``)."""
    DEAD_LETTER = "DEAD_LETTER"
    """RUNNING -> FAILED with ``last_error`` and ``finished_at``, owner cleared, counted as a
    failed child of its batch (as ``JobTerminalStore.mark_failed_terminal``)."""


def _retry_due(
    instance: FailedClaim, attribute: attrs.Attribute[Any], value: datetime | None
) -> None:
    require_utc(value, attribute.name)
    if instance.kind is FailureWrite.RETRY and value is None:
        raise ValueError(f"job {instance.job_id}: a RETRY write needs run_at")


@attrs.frozen(kw_only=True)
class FailedClaim:
    """One fenced failure write for ``WorkerBatchStore.write_failures``: applies only while
    the job is RUNNING under ``claim_seq``."""

    job_id: UUID
    claim_seq: int
    kind: FailureWrite
    error: str
    run_at: datetime | None = attrs.field(default=None, validator=_retry_due)
    """When a RETRY is due again (aware UTC); ignored for a DEAD_LETTER."""


@attrs.frozen(kw_only=True)
class NodeEntity:
    """A worker node as stored by ``NodeStore``; ``last_heartbeat`` is the store's clock."""

    node_id: str
    host: str = ""
    pid: int = 0
    started_at: datetime = attrs.field(factory=utc_now, validator=_utc)
    last_heartbeat: datetime = attrs.field(factory=utc_now, validator=_utc)
    running_jobs: int = 0
    tags: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)


class MisfirePolicy(enum.StrEnum):
    """What a recurring definition does with fire times missed while no node ran."""

    FIRE_ONCE = "FIRE_ONCE"
    """Fire one occurrence now for all missed times, then continue on schedule."""
    SKIP = "SKIP"
    """Drop missed occurrences; continue at the next future fire time."""
    FIRE_ALL = "FIRE_ALL"
    """Fire one occurrence per missed fire time."""


@attrs.frozen(kw_only=True)
class RecurringJobEntity:
    """A recurring (cron) definition, unique by ``name``."""

    name: str = attrs.field(validator=_key)
    cron: str
    timezone: str = "UTC"
    target: str = ""
    payload: str = "{}"
    priority: int = attrs.field(default=JobPriority.NORMAL, converter=as_priority)
    max_retries: int = 3
    next_fire_at: datetime = attrs.field(validator=_utc)
    last_fired_at: datetime | None = attrs.field(default=None, validator=_utc)
    misfire_policy: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    enabled: bool = True
    created_at: datetime = attrs.field(factory=utc_now, validator=_utc)


@attrs.frozen(kw_only=True)
class RecurringAdvance:
    """One compare-and-set of ``RecurringJobStore.advance_next_fire_many``."""

    name: str
    expected_fire_at: datetime = attrs.field(validator=_utc)
    next_fire_at: datetime = attrs.field(validator=_utc)


class BatchStatus(enum.StrEnum):
    OPEN = "OPEN"
    """Children may still be added (streaming batches)."""
    SEALED = "SEALED"
    """The total is final; the batch completes when every child has finished."""
    COMPLETED = "COMPLETED"
    """Every child finished; completion callbacks were released exactly once."""
    CANCELLED = "CANCELLED"


@attrs.frozen(kw_only=True)
class BatchEntity:
    """Progress of a batch: ``succeeded + failed`` reaches ``total`` when it can complete."""

    id: UUID = attrs.field(factory=uuid7)
    name: str = ""
    status: BatchStatus = BatchStatus.OPEN
    total: int = attrs.field(default=0, validator=_non_negative)
    succeeded: int = attrs.field(default=0, validator=_non_negative)
    failed: int = attrs.field(default=0, validator=_non_negative)
    parent_job_id: UUID | None = None
    created_at: datetime = attrs.field(factory=utc_now, validator=_utc)
    completed_at: datetime | None = attrs.field(default=None, validator=_utc)
    last_error: str | None = None
    """Why the last streaming chunk failed (None: no chunk failed)."""

    @property
    def pending(self) -> int:
        """Children counted in ``total`` that have not finished yet."""
        return max(0, self.total - self.succeeded - self.failed)

    @property
    def finished(self) -> int:
        return self.succeeded + self.failed


class ConditionKind(enum.StrEnum):
    ON_SUCCESS = "ON_SUCCESS"
    ON_FAILURE = "ON_FAILURE"
    ALWAYS = "ALWAYS"
    CUSTOM = "CUSTOM"
    """``expression`` holds a serialized predicate invocation returning bool."""


@attrs.frozen(kw_only=True)
class WorkflowConditionEntity:
    """Links a WAITING child job to its parent with the condition that releases it."""

    id: UUID = attrs.field(factory=uuid7)
    parent_job_id: UUID
    child_job_id: UUID
    kind: ConditionKind = ConditionKind.ON_SUCCESS
    expression: str | None = None
    position: int = 0


_SETTLED = frozenset({"PENDING", "AWAITING_SIGNAL", "CANCELLED"})


def _settled_status(_: object, attribute: attrs.Attribute[Any], value: JobStatus) -> None:
    if value.value not in _SETTLED:
        raise ValueError(
            f"status must be PENDING, AWAITING_SIGNAL or CANCELLED for a settled child, got {value}"
        )


@attrs.frozen(kw_only=True)
class ChildSettlement:
    """Where ``JobBatchStatusStore.settle_children`` moves one WAITING child.

    PENDING: due now. AWAITING_SIGNAL: waits for its signal until ``signal_deadline`` (None:
    no deadline). CANCELLED: finished with ``reason`` as ``last_error``.
    """

    child_id: UUID
    status: JobStatus = attrs.field(validator=_settled_status)
    reason: str | None = None
    signal_deadline: datetime | None = attrs.field(default=None, validator=_utc)


@attrs.frozen(kw_only=True)
class LockEntity:
    """A lease as stored by ``LockStore``; ``expires_at`` is on the store's clock."""

    name: str
    owner: str
    acquired_at: datetime = attrs.field(validator=_utc)
    expires_at: datetime = attrs.field(validator=_utc)


@attrs.frozen(kw_only=True)
class ExecutionRecord:
    """One execution attempt of a job, kept by ``JobAuditStore``.

    ``status`` is the outcome the attempt reached (SUCCEEDED, or FAILED for a failed attempt,
    whether retried or dead-lettered). ``superseded`` is True when that outcome was **not**
    written because the attempt's claim had been superseded meanwhile (the job was cancelled,
    or recovered and claimed again, while it ran): only the attempt whose fenced write applied
    has ``superseded`` False. ``error`` is the sanitized message of a failed attempt,
    ``traceback`` its sanitized traceback (``ErrorSanitizer.sanitize_traceback``) or None.
    """

    id: UUID = attrs.field(factory=uuid7)
    job_id: UUID
    attempt: int
    node_id: str
    status: JobStatus
    started_at: datetime = attrs.field(validator=_utc)
    finished_at: datetime | None = attrs.field(default=None, validator=_utc)
    duration_ms: int | None = None
    error: str | None = None
    traceback: str | None = None
    superseded: bool = False


class LogLevel(enum.StrEnum):
    TRACE = "TRACE"
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"


@attrs.frozen(kw_only=True)
class JobLogLine:
    """One line of a job's stored log."""

    job_id: UUID
    logged_at: datetime = attrs.field(factory=utc_now, validator=_utc)
    level: LogLevel = LogLevel.INFO
    message: str = ""
    attempt: int = 0


class SortOrder(enum.StrEnum):
    NEWEST_FIRST = "NEWEST_FIRST"
    OLDEST_FIRST = "OLDEST_FIRST"


@attrs.frozen(kw_only=True)
class JobQuery:
    """Filters of ``JobQueryStore.search_jobs``/``count_jobs``; every filter is ANDed, None = any.

    ``properties`` filters need the ``JobExtensionStore`` capability (exact match on each key).
    """

    statuses: frozenset[JobStatus] | None = None
    target: str | None = None
    tag: str | None = None
    job_type: JobType | None = None
    parent_id: UUID | None = None
    batch_id: UUID | None = None
    created_after: datetime | None = attrs.field(default=None, validator=_utc)
    created_before: datetime | None = attrs.field(default=None, validator=_utc)
    properties: Mapping[str, str] = attrs.field(factory=dict)
    limit: int = 100
    offset: int = 0
    order: SortOrder = SortOrder.NEWEST_FIRST
    preview: int | None = None
    """For listings: a store may return ``payload`` and ``result`` cut to their first
    ``preview + 1`` characters instead of whole (a longer value is then recognisable as cut), so
    that a list never loads a large argument or result. Entities read this way are for display
    only. None: whole values (a store may always return whole values)."""

    def __attrs_post_init__(self) -> None:
        if self.preview is not None and self.preview < 1:
            raise ValueError(f"preview must be at least 1, got {self.preview}")
        if not 1 <= self.limit <= 10_000:
            raise ValueError(f"limit must be between 1 and 10000, got {self.limit}")
        if self.offset < 0:
            raise ValueError(f"offset must not be negative, got {self.offset}")


@attrs.frozen(kw_only=True)
class StatusCount:
    status: JobStatus
    count: int


def as_timedelta(value: timedelta | float) -> timedelta:
    """Accept seconds or a timedelta (store helper)."""
    return value if isinstance(value, timedelta) else timedelta(seconds=value)


STORED_VALUE_COLUMNS = ("payload", "result", "last_error", "signal_payload", "state", "condition")
"""The stored values of a job that payload encryption may seal (``StoredValue.column``):
its columns, its state per namespace, and ``condition``: the expression of the workflow
condition that releases it (the condition row whose ``child_job_id`` is the job)."""


@attrs.frozen(kw_only=True)
class StoredValue:
    """One stored text value of a job as ``SealedValueStore`` reads and rewrites it.

    ``column`` is one of ``STORED_VALUE_COLUMNS``; ``namespace`` names the state namespace
    (empty for the job columns); ``text`` is the value exactly as stored."""

    job_id: UUID
    column: str
    text: str
    namespace: str = ""


__all__ = [
    "MAX_KEY_LENGTH",
    "STORED_VALUE_COLUMNS",
    "StoredValue",
    "MAX_TAG_LENGTH",
    "BatchEntity",
    "BatchStatus",
    "ChildSettlement",
    "Completion",
    "FailedClaim",
    "FailureWrite",
    "ConditionKind",
    "ExecutionRecord",
    "JobEntity",
    "JobLogLine",
    "JobQuery",
    "LockEntity",
    "LogLevel",
    "MisfirePolicy",
    "NodeEntity",
    "RecurringAdvance",
    "RecurringJobEntity",
    "SortOrder",
    "StatusCount",
    "WorkflowConditionEntity",
    "as_timedelta",
]
