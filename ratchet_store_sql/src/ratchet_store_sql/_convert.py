"""Rows <-> entities. Values read back are validated: an unknown enum value in a row is a
``StoreDataError`` naming the column (and the job), never a bare ``ValueError``."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from uuid import UUID

from ratchet_api.errors import StoreDataError
from ratchet_api.model import JobStatus, JobType, as_priority
from ratchet_api.store.entities import (
    BatchEntity,
    BatchStatus,
    ConditionKind,
    ExecutionRecord,
    JobEntity,
    JobLogLine,
    LockEntity,
    LogLevel,
    MisfirePolicy,
    NodeEntity,
    RecurringJobEntity,
    WorkflowConditionEntity,
)

E = TypeVar("E", bound=enum.Enum)
Row = Mapping[Any, Any]
"""A database row (``RowMapping``) or a plain dict."""

JOB_FIELDS = (
    "id",
    "status",
    "priority",
    "job_type",
    "target",
    "payload",
    "scheduled_at",
    "created_at",
    "updated_at",
    "started_at",
    "finished_at",
    "attempt",
    "max_retries",
    "backoff",
    "claim_seq",
    "owner",
    "heartbeat_at",
    "idempotency_key",
    "execution_target",
    "result",
    "last_error",
    "parent_id",
    "batch_id",
    "signal_key",
    "signal_deadline",
    "signal_payload",
    "resource_key",
    "recurring_name",
    "dispatched_at",
    "workflow",
    "flow_control",
)


def enum_value(kind: type[E], value: Any, field: str, job_id: UUID | None = None) -> E:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in kind)
        raise StoreDataError(
            field, f"unknown value {value!r} (expected one of {allowed})", job_id=job_id
        ) from None


def require_utc(value: datetime | None, field: str) -> None:
    """Refuse a naive or non-UTC datetime argument, naming it."""
    if value is None or (type(value) is datetime and value.tzinfo is UTC):
        return
    if not isinstance(value, datetime):
        raise StoreDataError(field, f"expected a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() != timedelta(0):
        raise StoreDataError(field, f"must be a timezone-aware UTC datetime, got {value!r}")


def job_to_row(job: JobEntity) -> dict[str, Any]:
    for name in ("scheduled_at", "created_at", "updated_at", "started_at", "finished_at"):
        require_utc(getattr(job, name), name)
    require_utc(job.heartbeat_at, "heartbeat_at")
    require_utc(job.signal_deadline, "signal_deadline")
    require_utc(job.dispatched_at, "dispatched_at")
    row = {name: getattr(job, name) for name in JOB_FIELDS}
    row["status"] = enum_value(JobStatus, job.status, "status", job.id).value
    row["priority"] = int(job.priority)
    row["job_type"] = enum_value(JobType, job.job_type, "job_type", job.id).value
    return row


def row_to_job(row: Row, tags: Sequence[str] = ()) -> JobEntity:
    job_id: UUID = row["id"]
    values = {name: row[name] for name in JOB_FIELDS}
    values["status"] = enum_value(JobStatus, row["status"], "status", job_id)
    try:
        values["priority"] = as_priority(row["priority"])
    except ValueError:
        raise StoreDataError(
            "priority", f"unknown value {row['priority']!r}", job_id=job_id
        ) from None
    values["job_type"] = enum_value(JobType, row["job_type"], "job_type", job_id)
    try:
        return JobEntity(tags=(*sorted(tags),), **values)
    except (ValueError, TypeError) as exc:
        raise StoreDataError("job", f"stored row is invalid: {exc}", job_id=job_id) from exc


def node_to_row(node: NodeEntity) -> dict[str, Any]:
    require_utc(node.started_at, "started_at")
    return {
        "node_id": node.node_id,
        "host": node.host,
        "pid": node.pid,
        "started_at": node.started_at,
        "running_jobs": node.running_jobs,
        "tags": json.dumps(sorted(node.tags)),
    }


def row_to_node(row: Row) -> NodeEntity:
    try:
        tags = json.loads(row["tags"])
    except ValueError:
        raise StoreDataError("tags", f"node {row['node_id']!r}: not JSON") from None
    return NodeEntity(
        node_id=row["node_id"],
        host=row["host"],
        pid=row["pid"],
        started_at=row["started_at"],
        last_heartbeat=row["last_heartbeat"],
        running_jobs=row["running_jobs"],
        tags=(*tags,),
    )


def recurring_to_row(rec: RecurringJobEntity) -> dict[str, Any]:
    require_utc(rec.next_fire_at, "next_fire_at")
    require_utc(rec.last_fired_at, "last_fired_at")
    return {
        "name": rec.name,
        "cron": rec.cron,
        "timezone": rec.timezone,
        "target": rec.target,
        "payload": rec.payload,
        "priority": int(rec.priority),
        "max_retries": rec.max_retries,
        "next_fire_at": rec.next_fire_at,
        "last_fired_at": rec.last_fired_at,
        "misfire_policy": enum_value(MisfirePolicy, rec.misfire_policy, "misfire_policy").value,
        "enabled": rec.enabled,
        "created_at": rec.created_at,
    }


def row_to_recurring(row: Row) -> RecurringJobEntity:
    try:
        priority = as_priority(row["priority"])
    except ValueError:
        raise StoreDataError("priority", f"recurring {row['name']!r}: unknown value") from None
    return RecurringJobEntity(
        name=row["name"],
        cron=row["cron"],
        timezone=row["timezone"],
        target=row["target"],
        payload=row["payload"],
        priority=priority,
        max_retries=row["max_retries"],
        next_fire_at=row["next_fire_at"],
        last_fired_at=row["last_fired_at"],
        misfire_policy=enum_value(MisfirePolicy, row["misfire_policy"], "misfire_policy"),
        enabled=bool(row["enabled"]),
        created_at=row["created_at"],
    )


def batch_to_row(batch: BatchEntity) -> dict[str, Any]:
    return {
        "id": batch.id,
        "name": batch.name,
        "status": enum_value(BatchStatus, batch.status, "status").value,
        "total": batch.total,
        "succeeded": batch.succeeded,
        "failed": batch.failed,
        "parent_job_id": batch.parent_job_id,
        "created_at": batch.created_at,
        "completed_at": batch.completed_at,
        "last_error": batch.last_error,
    }


def row_to_batch(row: Row) -> BatchEntity:
    return BatchEntity(
        id=row["id"],
        name=row["name"],
        status=enum_value(BatchStatus, row["status"], "status"),
        total=row["total"],
        succeeded=row["succeeded"],
        failed=row["failed"],
        parent_job_id=row["parent_job_id"],
        created_at=row["created_at"],
        completed_at=row["completed_at"],
        last_error=row["last_error"],
    )


def condition_to_row(c: WorkflowConditionEntity) -> dict[str, Any]:
    return {
        "id": c.id,
        "parent_job_id": c.parent_job_id,
        "child_job_id": c.child_job_id,
        "kind": enum_value(ConditionKind, c.kind, "kind").value,
        "expression": c.expression,
        "position": c.position,
    }


def row_to_condition(row: Row) -> WorkflowConditionEntity:
    return WorkflowConditionEntity(
        id=row["id"],
        parent_job_id=row["parent_job_id"],
        child_job_id=row["child_job_id"],
        kind=enum_value(ConditionKind, row["kind"], "kind"),
        expression=row["expression"],
        position=row["position"],
    )


def row_to_lock(row: Row) -> LockEntity:
    return LockEntity(
        name=row["name"],
        owner=row["owner"],
        acquired_at=row["acquired_at"],
        expires_at=row["expires_at"],
    )


def execution_to_row(rec: ExecutionRecord) -> dict[str, Any]:
    require_utc(rec.started_at, "started_at")
    require_utc(rec.finished_at, "finished_at")
    return {
        "id": rec.id,
        "job_id": rec.job_id,
        "attempt": rec.attempt,
        "node_id": rec.node_id,
        "status": enum_value(JobStatus, rec.status, "status").value,
        "started_at": rec.started_at,
        "finished_at": rec.finished_at,
        "duration_ms": rec.duration_ms,
        "error": rec.error,
        "traceback": rec.traceback,
        "superseded": rec.superseded,
    }


def row_to_execution(row: Row) -> ExecutionRecord:
    return ExecutionRecord(
        id=row["id"],
        job_id=row["job_id"],
        attempt=row["attempt"],
        node_id=row["node_id"],
        status=enum_value(JobStatus, row["status"], "status", row["job_id"]),
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        duration_ms=row["duration_ms"],
        error=row["error"],
        traceback=row["traceback"],
        superseded=bool(row["superseded"]),
    )


def log_to_row(line: JobLogLine) -> dict[str, Any]:
    require_utc(line.logged_at, "logged_at")
    return {
        "job_id": line.job_id,
        "logged_at": line.logged_at,
        "level": enum_value(LogLevel, line.level, "level").value,
        "message": line.message,
        "attempt": line.attempt,
    }


def row_to_log(row: Row) -> JobLogLine:
    return JobLogLine(
        job_id=row["job_id"],
        logged_at=row["logged_at"],
        level=enum_value(LogLevel, row["level"], "level", row["job_id"]),
        message=row["message"],
        attempt=row["attempt"],
    )
