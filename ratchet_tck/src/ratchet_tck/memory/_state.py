"""The shared state and validation of the in-memory store (one lock guards everything)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from uuid import UUID

import attrs

from ratchet_api.errors import JobNotFoundError, StoreDataError
from ratchet_api.model import JobStatus, VersionedState
from ratchet_api.store.entities import (
    MAX_KEY_LENGTH,
    MAX_TAG_LENGTH,
    BatchEntity,
    ExecutionRecord,
    JobEntity,
    JobLogLine,
    LockEntity,
    NodeEntity,
    RecurringJobEntity,
    WorkflowConditionEntity,
)

_JOB_TIMES = (
    "scheduled_at",
    "created_at",
    "updated_at",
    "started_at",
    "finished_at",
    "heartbeat_at",
    "signal_deadline",
)
_JOB_KEYS = ("idempotency_key", "signal_key", "resource_key")


def check_utc(value: datetime | None, field: str, job_id: UUID | None = None) -> None:
    if value is None:
        return
    if not isinstance(value, datetime) or value.utcoffset() != timedelta(0):
        raise StoreDataError(field, f"must be an aware UTC datetime, got {value!r}", job_id=job_id)


def check_key(value: str | None, field: str) -> None:
    if value is not None and (not value or len(value) > MAX_KEY_LENGTH):
        raise StoreDataError(field, f"must be 1 to {MAX_KEY_LENGTH} characters, got {len(value)}")


def check_tags(tags: tuple[str, ...] | list[str], job_id: UUID | None = None) -> None:
    for tag in tags:
        if not isinstance(tag, str) or not tag or len(tag) > MAX_TAG_LENGTH:
            raise StoreDataError(
                "tags",
                f"tag {str(tag)[:20]!r} must be 1 to {MAX_TAG_LENGTH} characters",
                job_id=job_id,
            )


def check_positive(value: timedelta, field: str) -> None:
    if value <= timedelta(0):
        raise StoreDataError(field, f"must be positive, got {value}")


def check_job(job: JobEntity) -> None:
    for field in _JOB_TIMES:
        check_utc(getattr(job, field), field, job.id)
    for field in _JOB_KEYS:
        check_key(getattr(job, field), field)
    check_tags(job.tags, job.id)


@attrs.frozen(kw_only=True)
class Archived:
    job: JobEntity
    properties: dict[str, str]
    states: dict[str, VersionedState]


class MemoryState:
    """Every collection of the in-memory store. Callers hold ``lock`` while touching them."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.jobs: dict[UUID, JobEntity] = {}
        self.archive: dict[UUID, Archived] = {}
        self.properties: dict[UUID, dict[str, str]] = {}
        self.states: dict[UUID, dict[str, VersionedState]] = {}
        self.nodes: dict[str, NodeEntity] = {}
        self.recurring: dict[str, RecurringJobEntity] = {}
        self.batches: dict[UUID, BatchEntity] = {}
        self.conditions: list[WorkflowConditionEntity] = []
        self.permits: dict[str, dict[str, datetime]] = {}
        self.rate_buckets: dict[str, tuple[float, datetime]] = {}
        self.locks: dict[str, LockEntity] = {}
        self.executions: list[ExecutionRecord] = []
        self.logs: list[JobLogLine] = []

    @staticmethod
    def now() -> datetime:
        return datetime.now(UTC)

    def job(self, job_id: UUID) -> JobEntity:
        job = self.jobs.get(job_id)
        if job is None:
            raise JobNotFoundError(job_id)
        return job

    def put(self, job: JobEntity, **changes: object) -> JobEntity:
        updated = attrs.evolve(job, updated_at=self.now(), **changes)  # type: ignore[arg-type]
        self.jobs[job.id] = updated
        return updated

    def fenced(self, job_id: UUID, claim_seq: int) -> JobEntity | None:
        job = self.jobs.get(job_id)
        if job is None or job.status is not JobStatus.RUNNING or job.claim_seq != claim_seq:
            return None
        return job

    def count_batch_child(self, job: JobEntity, succeeded: bool) -> None:
        """Count a job that just finished in its batch (the BatchStore progress contract)."""
        batch = self.batches.get(job.batch_id) if job.batch_id is not None else None
        if batch is None:
            return
        if succeeded:
            batch = attrs.evolve(batch, succeeded=batch.succeeded + 1)
        else:
            batch = attrs.evolve(batch, failed=batch.failed + 1)
        self.batches[batch.id] = batch

    def drop_owned(self, job_id: UUID) -> None:
        self.properties.pop(job_id, None)
        self.states.pop(job_id, None)
        self.executions = [e for e in self.executions if e.job_id != job_id]
        self.logs = [line for line in self.logs if line.job_id != job_id]

    def clear(self) -> None:
        with self.lock:
            for value in vars(self).values():
                if isinstance(value, (dict, list)):
                    value.clear()
