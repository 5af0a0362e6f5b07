"""The optional capabilities of the in-memory store, as mixins over ``CoreMemoryStore``."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from uuid import UUID

import attrs

from ratchet_api.errors import (
    DuplicateJobError,
    InvalidStateTransitionError,
    StoreDataError,
)
from ratchet_api.model import TERMINAL_STATUSES, JobStatus, StateWriteResult, VersionedState
from ratchet_api.store.entities import (
    BatchEntity,
    BatchStatus,
    ExecutionRecord,
    JobEntity,
    JobLogLine,
    JobQuery,
    LockEntity,
    RecurringAdvance,
    RecurringJobEntity,
    SortOrder,
    WorkflowConditionEntity,
)
from ratchet_api.store.queues import QueueStats, stats_of_jobs
from ratchet_tck.memory._core import CoreMemoryStore
from ratchet_tck.memory._state import (
    Archived,
    check_key,
    check_positive,
    check_utc,
)


class RecurringMixin(CoreMemoryStore):
    def save_recurring(self, recurring: RecurringJobEntity) -> RecurringJobEntity:
        check_key(recurring.name, "name")
        check_utc(recurring.next_fire_at, "next_fire_at")
        with self._s.lock:
            self._s.recurring[recurring.name] = recurring
            return recurring

    def find_recurring(self, name: str) -> RecurringJobEntity | None:
        with self._s.lock:
            return self._s.recurring.get(name)

    def list_recurring(self) -> list[RecurringJobEntity]:
        with self._s.lock:
            return sorted(self._s.recurring.values(), key=lambda r: r.name)

    def find_due_recurring(self, limit: int) -> list[RecurringJobEntity]:
        s = self._s
        with s.lock:
            now = s.now()
            due = [r for r in s.recurring.values() if r.enabled and r.next_fire_at <= now]
        return sorted(due, key=lambda r: (r.next_fire_at, r.name))[:limit]

    def advance_next_fire(
        self, name: str, expected_fire_at: datetime, next_fire_at: datetime
    ) -> bool:
        check_utc(expected_fire_at, "expected_fire_at")
        check_utc(next_fire_at, "next_fire_at")
        s = self._s
        with s.lock:
            current = s.recurring.get(name)
            if current is None or current.next_fire_at != expected_fire_at:
                return False
            s.recurring[name] = attrs.evolve(
                current, next_fire_at=next_fire_at, last_fired_at=expected_fire_at
            )
            return True

    def advance_next_fire_many(self, advances: Sequence[RecurringAdvance]) -> set[str]:
        for a in advances:
            check_utc(a.expected_fire_at, "expected_fire_at")
            check_utc(a.next_fire_at, "next_fire_at")
        with self._s.lock:
            return {
                a.name
                for a in sorted(advances, key=lambda x: x.name)
                if self.advance_next_fire(a.name, a.expected_fire_at, a.next_fire_at)
            }

    def delete_recurring(self, name: str) -> bool:
        with self._s.lock:
            return self._s.recurring.pop(name, None) is not None


class BatchMixin(CoreMemoryStore):
    def save_batch(self, batch: BatchEntity) -> BatchEntity:
        with self._s.lock:
            if batch.id in self._s.batches:
                raise DuplicateJobError(f"batch {batch.id} already exists")
            self._s.batches[batch.id] = batch
            return batch

    def insert_batch(self, batch: BatchEntity, jobs: Sequence[JobEntity]) -> int:
        with self._s.lock:
            if batch.id in self._s.batches:
                raise DuplicateJobError(f"batch {batch.id} already exists")
            inserted = self.bulk_insert(jobs)  # validates everything before writing
            self._s.batches[batch.id] = batch
            return inserted

    def add_batch_jobs(self, batch_id: UUID, jobs: Sequence[JobEntity]) -> int:
        s = self._s
        with s.lock:
            batch = self._batch(batch_id)
            if batch.status is not BatchStatus.OPEN:
                raise InvalidStateTransitionError(
                    f"batch {batch_id} is {batch.status}; children can only be added while OPEN"
                )
            inserted = self.bulk_insert(jobs)
            s.batches[batch_id] = attrs.evolve(batch, total=batch.total + inserted)
            return inserted

    def find_batches(
        self, *, statuses: frozenset[BatchStatus] | None = None, limit: int = 100, offset: int = 0
    ) -> list[BatchEntity]:
        with self._s.lock:
            found = [
                b for b in self._s.batches.values() if statuses is None or b.status in statuses
            ]
        found.sort(key=lambda b: (b.created_at, b.id.int), reverse=True)
        return found[offset : offset + limit]

    def recount_batch(self, batch_id: UUID) -> BatchEntity | None:
        s = self._s
        with s.lock:
            batch = s.batches.get(batch_id)
            if batch is None:
                return None
            children = [j.status for j in s.jobs.values() if j.batch_id == batch_id]
            succeeded = children.count(JobStatus.SUCCEEDED)
            failed = children.count(JobStatus.FAILED) + children.count(JobStatus.CANCELLED)
            batch = attrs.evolve(
                batch,
                succeeded=max(batch.succeeded, succeeded),
                failed=max(batch.failed, failed),
            )
            s.batches[batch_id] = batch
            return batch

    def record_batch_error(self, batch_id: UUID, error: str) -> bool:
        s = self._s
        with s.lock:
            batch = s.batches.get(batch_id)
            if batch is None:
                return False
            s.batches[batch_id] = attrs.evolve(batch, last_error=error)
            return True

    def find_batch(self, batch_id: UUID) -> BatchEntity | None:
        with self._s.lock:
            return self._s.batches.get(batch_id)

    def _batch(self, batch_id: UUID) -> BatchEntity:
        batch = self._s.batches.get(batch_id)
        if batch is None:
            raise InvalidStateTransitionError(f"batch {batch_id} not found")
        return batch

    def add_to_total(self, batch_id: UUID, count: int) -> BatchEntity:
        if count < 0:
            raise StoreDataError("count", f"must not be negative, got {count}")
        s = self._s
        with s.lock:
            batch = self._batch(batch_id)
            if batch.status is not BatchStatus.OPEN:
                raise InvalidStateTransitionError(
                    f"batch {batch_id} is {batch.status}; children can only be added while OPEN"
                )
            s.batches[batch_id] = attrs.evolve(batch, total=batch.total + count)
            return s.batches[batch_id]

    def seal_batch(self, batch_id: UUID) -> bool:
        s = self._s
        with s.lock:
            batch = s.batches.get(batch_id)
            if batch is None or batch.status is not BatchStatus.OPEN:
                return False
            s.batches[batch_id] = attrs.evolve(batch, status=BatchStatus.SEALED)
            return True

    def increment_finished(self, batch_id: UUID, succeeded: bool) -> BatchEntity:
        s = self._s
        with s.lock:
            batch = self._batch(batch_id)
            if succeeded:
                batch = attrs.evolve(batch, succeeded=batch.succeeded + 1)
            else:
                batch = attrs.evolve(batch, failed=batch.failed + 1)
            s.batches[batch_id] = batch
            return batch

    def mark_batch_complete_if_ready(self, batch_id: UUID) -> bool:
        s = self._s
        with s.lock:
            batch = s.batches.get(batch_id)
            if batch is None or batch.status is not BatchStatus.SEALED:
                return False
            if batch.finished < batch.total:
                return False
            s.batches[batch_id] = attrs.evolve(
                batch, status=BatchStatus.COMPLETED, completed_at=s.now()
            )
            return True


class WorkflowConditionMixin(CoreMemoryStore):
    def save_conditions(self, conditions: Sequence[WorkflowConditionEntity]) -> None:
        with self._s.lock:
            self._s.conditions.extend(conditions)

    def find_conditions_by_parent(self, parent_job_id: UUID) -> list[WorkflowConditionEntity]:
        with self._s.lock:
            found = [c for c in self._s.conditions if c.parent_job_id == parent_job_id]
        return sorted(found, key=lambda c: c.position)

    def delete_conditions_by_parent(self, parent_job_id: UUID) -> int:
        s = self._s
        with s.lock:
            kept = [c for c in s.conditions if c.parent_job_id != parent_job_id]
            removed = len(s.conditions) - len(kept)
            s.conditions[:] = kept
            return removed


class SignalMixin(CoreMemoryStore):
    def deliver_signal_by_id(self, job_id: UUID, payload: str | None) -> bool:
        s = self._s
        with s.lock:
            job = s.jobs.get(job_id)
            if job is None or job.status is not JobStatus.AWAITING_SIGNAL:
                return False
            s.put(job, status=JobStatus.PENDING, scheduled_at=s.now(), signal_payload=payload)
            return True

    def deliver_signal_by_key(self, signal_key: str, payload: str | None) -> int:
        s = self._s
        with s.lock:
            waiting = [
                j.id
                for j in s.jobs.values()
                if j.status is JobStatus.AWAITING_SIGNAL and j.signal_key == signal_key
            ]
            return sum(self.deliver_signal_by_id(i, payload) for i in waiting)

    def find_timed_out_signal_jobs(self, limit: int) -> list[JobEntity]:
        s = self._s
        with s.lock:
            now = s.now()
            late = [
                j
                for j in s.jobs.values()
                if j.status is JobStatus.AWAITING_SIGNAL
                and j.signal_deadline is not None
                and j.signal_deadline < now
            ]
        return sorted(late, key=lambda j: (j.signal_deadline, j.id.int))[:limit]

    def expire_signal(self, job_id: UUID, error: str, status: JobStatus = JobStatus.FAILED) -> bool:
        if status not in (JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.PENDING):
            raise StoreDataError("status", f"must be FAILED, CANCELLED or PENDING, got {status!r}")
        s = self._s
        with s.lock:
            job = s.jobs.get(job_id)
            if job is None or job.status is not JobStatus.AWAITING_SIGNAL:
                return False
            if status is JobStatus.PENDING:
                s.put(job, status=status, last_error=error, scheduled_at=s.now())
            else:
                s.put(job, status=status, last_error=error, finished_at=s.now())
                s.count_batch_child(job, False)
            return True

    def find_jobs_by_signal_key(self, signal_key: str, limit: int) -> list[JobEntity]:
        with self._s.lock:
            found = [j for j in self._s.jobs.values() if j.signal_key == signal_key]
        return sorted(found, key=lambda j: (j.created_at, j.id.int))[:limit]


class ResourcePermitMixin(CoreMemoryStore):
    def try_acquire_permit(
        self, resource_key: str, holder: str, limit: int, ttl: timedelta
    ) -> bool:
        check_key(resource_key, "resource_key")
        check_positive(ttl, "ttl")
        if limit < 1:
            raise StoreDataError("limit", f"must be at least 1, got {limit}")
        s = self._s
        with s.lock:
            now = s.now()
            live = {h: t for h, t in s.permits.get(resource_key, {}).items() if t > now}
            if holder not in live and len(live) >= limit:
                s.permits[resource_key] = live
                return False
            live[holder] = now + ttl
            s.permits[resource_key] = live
            return True

    def release_permit(self, resource_key: str, holder: str) -> bool:
        with self._s.lock:
            return self._s.permits.get(resource_key, {}).pop(holder, None) is not None

    def count_permits(self, resource_key: str) -> int:
        s = self._s
        with s.lock:
            now = s.now()
            return sum(t > now for t in s.permits.get(resource_key, {}).values())


class FlowControlMixin(CoreMemoryStore):
    def defer_claim(self, job_id: UUID, claim_seq: int, run_at: datetime) -> bool:
        check_utc(run_at, "run_at", job_id)
        s = self._s
        with s.lock:
            job = s.fenced(job_id, claim_seq)
            if job is None:
                return False
            s.put(
                job,
                status=JobStatus.PENDING,
                scheduled_at=run_at,
                attempt=max(job.attempt - 1, 0),
                owner=None,
                started_at=None,
                heartbeat_at=None,
            )
            return True

    def acquire_rate(self, key: str, limit: int, per: timedelta) -> timedelta:
        check_key(key, "key")
        check_positive(per, "per")
        if limit < 1:
            raise StoreDataError("limit", f"must be at least 1, got {limit}")
        rate = limit / per.total_seconds()
        s = self._s
        with s.lock:
            now = s.now()
            tokens, refreshed = s.rate_buckets.get(key, (float(limit), now))
            tokens = min(float(limit), tokens + (now - refreshed).total_seconds() * rate)
            if tokens < 1.0:
                s.rate_buckets[key] = (tokens, now)
                return timedelta(seconds=(1.0 - tokens) / rate)
            s.rate_buckets[key] = (tokens - 1.0, now)
            return timedelta(0)


class LockMixin(CoreMemoryStore):
    def try_lock(self, name: str, owner: str, ttl: timedelta) -> bool:
        check_key(name, "name")
        check_positive(ttl, "ttl")
        s = self._s
        with s.lock:
            now = s.now()
            current = s.locks.get(name)
            if current is not None and current.owner != owner and current.expires_at > now:
                return False
            s.locks[name] = LockEntity(
                name=name, owner=owner, acquired_at=now, expires_at=now + ttl
            )
            return True

    def unlock(self, name: str, owner: str) -> bool:
        s = self._s
        with s.lock:
            current = s.locks.get(name)
            if current is None or current.owner != owner:
                return False
            del s.locks[name]
            return True

    def renew_lock(self, name: str, owner: str, ttl: timedelta) -> bool:
        check_positive(ttl, "ttl")
        s = self._s
        with s.lock:
            now = s.now()
            current = s.locks.get(name)
            if current is None or current.owner != owner or current.expires_at <= now:
                return False
            s.locks[name] = attrs.evolve(current, expires_at=now + ttl)
            return True

    def find_lock(self, name: str) -> LockEntity | None:
        with self._s.lock:
            return self._s.locks.get(name)


class ArchiveMixin(CoreMemoryStore):
    def archive_job(self, job_id: UUID) -> bool:
        s = self._s
        with s.lock:
            job = s.jobs.get(job_id)
            if job is None or job.status not in TERMINAL_STATUSES:
                return False
            s.archive[job_id] = Archived(
                job=job,
                properties=s.properties.pop(job_id, {}),
                states=s.states.pop(job_id, {}),
            )
            del s.jobs[job_id]
            return True

    def archive_finished_before(
        self, cutoff: datetime, limit: int, statuses: Collection[JobStatus] | None = None
    ) -> int:
        check_utc(cutoff, "cutoff")
        wanted = TERMINAL_STATUSES if statuses is None else {JobStatus(x) for x in statuses}
        wrong = sorted(x.value for x in wanted - TERMINAL_STATUSES)
        if wrong:
            raise StoreDataError("statuses", f"only terminal statuses are archived, got {wrong}")
        s = self._s
        with s.lock:
            done = sorted(
                (
                    j
                    for j in s.jobs.values()
                    if j.status in wanted and j.finished_at is not None and j.finished_at < cutoff
                ),
                key=lambda j: (j.finished_at, j.id.int),
            )[:limit]
            return sum(self.archive_job(j.id) for j in done)

    def delete_archived_before(self, cutoff: datetime, limit: int) -> int:
        check_utc(cutoff, "cutoff")
        s = self._s
        with s.lock:
            old = sorted(
                (
                    a.job
                    for a in s.archive.values()
                    if a.job.finished_at is not None and a.job.finished_at < cutoff
                ),
                key=lambda j: (j.finished_at, j.id.int),
            )[: max(0, limit)]
            for job in old:
                del s.archive[job.id]
                s.drop_owned(job.id)
            return len(old)

    def find_archived_job(self, job_id: UUID) -> JobEntity | None:
        with self._s.lock:
            found = self._s.archive.get(job_id)
            return found.job if found is not None else None

    def find_archived_jobs(self, limit: int, offset: int = 0) -> list[JobEntity]:
        with self._s.lock:
            jobs = [a.job for a in self._s.archive.values()]
        jobs.sort(key=lambda j: (j.finished_at, j.id.int), reverse=True)
        return jobs[offset : offset + limit]


class QueryMixin(CoreMemoryStore):
    def _matching(self, query: JobQuery) -> list[JobEntity]:
        check_utc(query.created_after, "created_after")
        check_utc(query.created_before, "created_before")
        s = self._s
        with s.lock:
            found = []
            for j in s.jobs.values():
                props = s.properties.get(j.id, {})
                if (
                    (query.statuses is None or j.status in query.statuses)
                    and (query.target is None or j.target == query.target)
                    and (query.tag is None or query.tag in j.tags)
                    and (query.job_type is None or j.job_type is query.job_type)
                    and (query.parent_id is None or j.parent_id == query.parent_id)
                    and (query.batch_id is None or j.batch_id == query.batch_id)
                    and (query.created_after is None or j.created_at >= query.created_after)
                    and (query.created_before is None or j.created_at < query.created_before)
                    and all(props.get(k) == v for k, v in query.properties.items())
                ):
                    found.append(j)
        return found

    def search_jobs(self, query: JobQuery) -> list[JobEntity]:
        jobs = sorted(
            self._matching(query),
            key=lambda j: (j.created_at, j.id.int),
            reverse=query.order is SortOrder.NEWEST_FIRST,
        )
        return jobs[query.offset : query.offset + query.limit]

    def count_jobs(self, query: JobQuery) -> int:
        return len(self._matching(query))

    def find_job_ids_by_tag(self, tag: str, limit: int) -> list[UUID]:
        with self._s.lock:
            ids = [j.id for j in self._s.jobs.values() if tag in j.tags]
        return sorted(ids, key=lambda i: i.int)[:limit]


def _nearest_rank(values: list[timedelta], percentile: float) -> timedelta | None:
    if not 0 <= percentile <= 100:
        raise StoreDataError("percentile", f"must be between 0 and 100, got {percentile}")
    if not values:
        return None
    values.sort()
    rank = max(1, math.ceil(percentile / 100 * len(values)))
    return values[rank - 1]


class AnalyticsMixin(CoreMemoryStore):
    def count_jobs_by_status(self) -> dict[JobStatus, int]:
        counts = dict.fromkeys(JobStatus, 0)
        with self._s.lock:
            for j in self._s.jobs.values():
                counts[j.status] += 1
        return counts

    def count_finished_since(self, since: datetime) -> dict[JobStatus, int]:
        check_utc(since, "since")
        counts = {status: 0 for status in JobStatus if status.is_terminal}
        with self._s.lock:
            for j in self._s.jobs.values():
                if j.status.is_terminal and j.finished_at is not None and j.finished_at >= since:
                    counts[j.status] += 1
        return counts

    def execution_time_percentile(self, percentile: float, since: datetime) -> timedelta | None:
        check_utc(since, "since")
        with self._s.lock:
            values = [
                j.finished_at - j.started_at
                for j in self._s.jobs.values()
                if j.status is JobStatus.SUCCEEDED
                and j.finished_at is not None
                and j.started_at is not None
                and j.finished_at >= since
            ]
        return _nearest_rank(values, percentile)

    def queue_wait_percentile(self, percentile: float, since: datetime) -> timedelta | None:
        check_utc(since, "since")
        with self._s.lock:
            values = [
                j.started_at - j.scheduled_at
                for j in self._s.jobs.values()
                if j.started_at is not None and j.started_at >= since
            ]
        return _nearest_rank(values, percentile)


class FairClaimMixin(CoreMemoryStore):
    """``FairClaimStore``: the core claim interleaves fairness keys."""

    fair_claims = True

    def claims_fairly(self) -> bool:
        return True


class StreamingBulkMixin(CoreMemoryStore):
    """``StreamingBulkStore``: the parts are read (outside the lock) before anything is
    written, so parts that raise write nothing; then one ``bulk_insert``."""

    def bulk_insert_parts(self, parts: Iterable[Sequence[JobEntity]]) -> int:
        return self.bulk_insert([job for part in parts for job in part])


class QueueStatsMixin(CoreMemoryStore):
    def queue_stats(self, finished_since: datetime | None = None) -> QueueStats:
        check_utc(finished_since, "finished_since")
        with self._s.lock:
            now = self._s.now()
            return stats_of_jobs(list(self._s.jobs.values()), now, finished_since)


class AuditMixin(CoreMemoryStore):
    def save_execution(self, record: ExecutionRecord) -> None:
        check_utc(record.started_at, "started_at", record.job_id)
        check_utc(record.finished_at, "finished_at", record.job_id)
        with self._s.lock:
            self._s.executions.append(record)

    def save_executions(self, records: Sequence[ExecutionRecord]) -> None:
        for record in records:
            check_utc(record.started_at, "started_at", record.job_id)
            check_utc(record.finished_at, "finished_at", record.job_id)
        with self._s.lock:
            self._s.executions.extend(records)

    def find_executions_by_job_id(self, job_id: UUID) -> list[ExecutionRecord]:
        with self._s.lock:
            found = [e for e in self._s.executions if e.job_id == job_id]
        return sorted(found, key=lambda e: e.attempt)

    def append_logs(self, lines: Sequence[JobLogLine]) -> None:
        for line in lines:
            check_utc(line.logged_at, "logged_at", line.job_id)
        with self._s.lock:
            self._s.logs.extend(lines)

    def find_logs_by_job_id(self, job_id: UUID, limit: int = 1000) -> list[JobLogLine]:
        with self._s.lock:
            return [line for line in self._s.logs if line.job_id == job_id][:limit]


class ExtensionMixin(CoreMemoryStore):
    def _props(self, job_id: UUID) -> dict[str, str] | None:
        s = self._s
        if job_id in s.archive:
            return s.archive[job_id].properties
        return s.properties.get(job_id)

    def _states(self, job_id: UUID) -> dict[str, VersionedState]:
        s = self._s
        if job_id in s.archive:
            return s.archive[job_id].states
        return s.states.get(job_id, {})

    def put_property(self, job_id: UUID, key: str, value: str) -> bool:
        check_key(key, "key")
        s = self._s
        with s.lock:
            s.job(job_id)
            props = s.properties.setdefault(job_id, {})
            if key in props:
                return False
            props[key] = value
            return True

    def get_property(self, job_id: UUID, key: str) -> str | None:
        with self._s.lock:
            return (self._props(job_id) or {}).get(key)

    def get_properties_by_prefix(self, job_id: UUID, prefix: str) -> dict[str, str]:
        with self._s.lock:
            props = self._props(job_id) or {}
            return {k: v for k, v in props.items() if k.startswith(prefix)}

    def get_state(self, job_id: UUID, namespace: str) -> VersionedState | None:
        with self._s.lock:
            return self._states(job_id).get(namespace)

    def _superseded(self, job_id: UUID, expected_claim_seq: int | None) -> bool:
        if expected_claim_seq is None:
            return False
        return self._s.fenced(job_id, expected_claim_seq) is None

    def init_state(
        self, job_id: UUID, namespace: str, state: str, expected_claim_seq: int | None = None
    ) -> StateWriteResult:
        check_key(namespace, "namespace")
        s = self._s
        with s.lock:
            s.job(job_id)
            if self._superseded(job_id, expected_claim_seq):
                return StateWriteResult.SUPERSEDED
            states = s.states.setdefault(job_id, {})
            if namespace in states:
                return StateWriteResult.VERSION_CONFLICT
            states[namespace] = VersionedState(json=state, version=0)
            return StateWriteResult.UPDATED

    def update_state(
        self,
        job_id: UUID,
        namespace: str,
        state: str,
        expected_version: int,
        expected_claim_seq: int | None = None,
    ) -> StateWriteResult:
        s = self._s
        with s.lock:
            if self._superseded(job_id, expected_claim_seq):
                return StateWriteResult.SUPERSEDED
            states = s.states.get(job_id, {})
            current = states.get(namespace)
            if current is None or current.version != expected_version:
                return StateWriteResult.VERSION_CONFLICT
            states[namespace] = VersionedState(json=state, version=current.version + 1)
            return StateWriteResult.UPDATED

    def properties_for_jobs(self, job_ids: Sequence[UUID]) -> Mapping[UUID, dict[str, str]]:
        with self._s.lock:
            found = {i: dict(self._props(i) or {}) for i in job_ids}
        return {i: p for i, p in found.items() if i in self._s.jobs or i in self._s.archive}
