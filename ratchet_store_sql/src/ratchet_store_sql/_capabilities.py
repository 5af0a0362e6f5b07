"""The optional capabilities: recurring, batch, workflow conditions, signals, resource permits,
locks, archive, query, analytics, audit and extension properties/state."""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

import sqlalchemy as sa

from ratchet_api.errors import InvalidStateTransitionError, JobNotFoundError, StoreDataError
from ratchet_api.model import (
    TERMINAL_STATUSES,
    JobStatus,
    StateWriteResult,
    VersionedState,
)
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
from ratchet_store_sql import schema as s
from ratchet_store_sql._base import SqlBase, chunks, retry_conflicts
from ratchet_store_sql._convert import (
    JOB_FIELDS,
    batch_to_row,
    condition_to_row,
    execution_to_row,
    log_to_row,
    recurring_to_row,
    require_utc,
    row_to_batch,
    row_to_condition,
    row_to_execution,
    row_to_job,
    row_to_lock,
    row_to_log,
    row_to_recurring,
)
from ratchet_store_sql._jobs import _seconds

J = s.jobs
T = s.job_tags
P = s.job_properties
ST = s.job_state
A = s.archived_jobs
TERMINAL = sorted(x.value for x in TERMINAL_STATUSES)
AWAITING = JobStatus.AWAITING_SIGNAL.value
SENTINEL = ""
"""Holder of the per-resource guard row that serializes permit acquisition."""


class RecurringOperations(SqlBase):
    def save_recurring(self, recurring: RecurringJobEntity) -> RecurringJobEntity:
        values = recurring_to_row(recurring)
        update = {k: v for k, v in values.items() if k != "name"}
        with self._write("save_recurring") as conn:
            conn.execute(self._d.upsert(s.recurring_jobs, values, ["name"], update))
        return recurring

    def find_recurring(self, name: str) -> RecurringJobEntity | None:
        with self._read("find_recurring") as conn:
            row = (
                conn.execute(sa.select(s.recurring_jobs).where(s.recurring_jobs.c.name == name))
                .mappings()
                .first()
            )
            return row_to_recurring(row) if row is not None else None

    def list_recurring(self) -> list[RecurringJobEntity]:
        with self._read("list_recurring") as conn:
            rows = conn.execute(
                sa.select(s.recurring_jobs).order_by(s.recurring_jobs.c.name)
            ).mappings()
            return [row_to_recurring(r) for r in rows]

    def find_due_recurring(self, limit: int) -> list[RecurringJobEntity]:
        r = s.recurring_jobs
        stmt = (
            sa.select(r)
            .where(r.c.enabled.is_(True), r.c.next_fire_at <= self._d.now())
            .order_by(r.c.next_fire_at, r.c.name)
            .limit(limit)
        )
        with self._read("find_due_recurring") as conn:
            return [row_to_recurring(x) for x in conn.execute(stmt).mappings()]

    @retry_conflicts
    def advance_next_fire(
        self, name: str, expected_fire_at: datetime, next_fire_at: datetime
    ) -> bool:
        require_utc(expected_fire_at, "expected_fire_at")
        require_utc(next_fire_at, "next_fire_at")
        r = s.recurring_jobs
        with self._write("advance_next_fire") as conn:
            stmt = (
                sa.update(r)
                .where(r.c.name == name, r.c.next_fire_at == expected_fire_at)
                .values(next_fire_at=next_fire_at, last_fired_at=expected_fire_at)
            )
            return conn.execute(stmt).rowcount == 1

    @retry_conflicts
    def advance_next_fire_many(self, advances: Sequence[RecurringAdvance]) -> set[str]:
        if not advances:
            return set()
        for a in advances:
            require_utc(a.expected_fire_at, "expected_fire_at")
            require_utc(a.next_fire_at, "next_fire_at")
        r = s.recurring_jobs
        stmt = (
            sa.update(r)
            .where(
                r.c.name == sa.bindparam("b_name"), r.c.next_fire_at == sa.bindparam("b_expected")
            )
            .values(next_fire_at=sa.bindparam("b_next"), last_fired_at=sa.bindparam("b_expected"))
        )
        won: set[str] = set()
        # one transaction, rows in name order: concurrent batches lock in the same order
        with self._write("advance_next_fire_many") as conn:
            for a in sorted(advances, key=lambda x: x.name):
                params = {
                    "b_name": a.name,
                    "b_expected": a.expected_fire_at,
                    "b_next": a.next_fire_at,
                }
                if conn.execute(stmt, params).rowcount == 1:
                    won.add(a.name)
        return won

    def delete_recurring(self, name: str) -> bool:
        with self._write("delete_recurring") as conn:
            r = s.recurring_jobs
            return conn.execute(sa.delete(r).where(r.c.name == name)).rowcount == 1


class BatchOperations(SqlBase):
    if TYPE_CHECKING:

        def _insert_jobs(self, conn: sa.Connection, jobs: Sequence[JobEntity]) -> int: ...

    def save_batch(self, batch: BatchEntity) -> BatchEntity:
        with self._write("save_batch") as conn:
            conn.execute(sa.insert(s.batches), [batch_to_row(batch)])
        return batch

    def insert_batch(self, batch: BatchEntity, jobs: Sequence[JobEntity]) -> int:
        with self._write("insert_batch") as conn:
            conn.execute(sa.insert(s.batches), [batch_to_row(batch)])
            return self._insert_jobs(conn, jobs) if jobs else 0

    def add_batch_jobs(self, batch_id: UUID, jobs: Sequence[JobEntity]) -> int:
        b = s.batches
        with self._write("add_batch_jobs") as conn:
            # the batch row is locked first: chunks of one batch are written one at a time
            status = conn.execute(
                sa.select(b.c.status).where(b.c.id == batch_id).with_for_update()
            ).scalar_one_or_none()
            if status is None:
                raise InvalidStateTransitionError(f"batch {batch_id} does not exist")
            if status != BatchStatus.OPEN.value:
                raise InvalidStateTransitionError(
                    f"batch {batch_id} is {status}: children can only be added to an OPEN batch"
                )
            inserted = self._insert_jobs(conn, jobs) if jobs else 0
            if inserted:
                conn.execute(
                    sa.update(b).where(b.c.id == batch_id).values(total=b.c.total + inserted)
                )
            return inserted

    def find_batches(
        self, *, statuses: frozenset[BatchStatus] | None = None, limit: int = 100, offset: int = 0
    ) -> list[BatchEntity]:
        b = s.batches
        stmt = sa.select(b).order_by(b.c.created_at.desc(), b.c.id.desc()).limit(limit)
        if offset:
            stmt = stmt.offset(offset)
        if statuses is not None:
            stmt = stmt.where(b.c.status.in_(sorted(BatchStatus(x).value for x in statuses)))
        with self._read("find_batches") as conn:
            return [row_to_batch(r) for r in conn.execute(stmt).mappings()]

    def recount_batch(self, batch_id: UUID) -> BatchEntity | None:
        b = s.batches
        with self._write("recount_batch") as conn:
            if (
                conn.execute(sa.select(b.c.id).where(b.c.id == batch_id).with_for_update()).first()
                is None
            ):
                return None
            counts: dict[str, int] = dict(
                conn.execute(
                    sa.select(J.c.status, sa.func.count())
                    .where(J.c.batch_id == batch_id, J.c.status.in_(TERMINAL))
                    .group_by(J.c.status)
                ).all()
            )
            succeeded = counts.get(JobStatus.SUCCEEDED.value, 0)
            failed = counts.get(JobStatus.FAILED.value, 0) + counts.get(
                JobStatus.CANCELLED.value, 0
            )
            conn.execute(
                sa.update(b)
                .where(b.c.id == batch_id)
                .values(
                    succeeded=sa.case((b.c.succeeded < succeeded, succeeded), else_=b.c.succeeded),
                    failed=sa.case((b.c.failed < failed, failed), else_=b.c.failed),
                )
            )
            return self._batch(conn, batch_id)

    def record_batch_error(self, batch_id: UUID, error: str) -> bool:
        b = s.batches
        with self._write("record_batch_error") as conn:
            return (
                conn.execute(
                    sa.update(b).where(b.c.id == batch_id).values(last_error=error)
                ).rowcount
                == 1
            )

    def _batch(self, conn: sa.Connection, batch_id: UUID) -> BatchEntity | None:
        row = conn.execute(sa.select(s.batches).where(s.batches.c.id == batch_id)).mappings()
        first = row.first()
        return row_to_batch(first) if first is not None else None

    def find_batch(self, batch_id: UUID) -> BatchEntity | None:
        with self._read("find_batch") as conn:
            return self._batch(conn, batch_id)

    def add_to_total(self, batch_id: UUID, count: int) -> BatchEntity:
        if count < 0:
            raise StoreDataError("count", f"must not be negative, got {count}")
        b = s.batches
        with self._write("add_to_total") as conn:
            changed = conn.execute(
                sa.update(b)
                .where(b.c.id == batch_id, b.c.status == BatchStatus.OPEN.value)
                .values(total=b.c.total + count)
            ).rowcount
            batch = self._batch(conn, batch_id)
            if batch is None:
                raise InvalidStateTransitionError(f"batch {batch_id} does not exist")
            if not changed:
                raise InvalidStateTransitionError(
                    f"batch {batch_id} is {batch.status.value}: children can only be added "
                    "to an OPEN batch"
                )
            return batch

    def seal_batch(self, batch_id: UUID) -> bool:
        b = s.batches
        with self._write("seal_batch") as conn:
            return (
                conn.execute(
                    sa.update(b)
                    .where(b.c.id == batch_id, b.c.status == BatchStatus.OPEN.value)
                    .values(status=BatchStatus.SEALED.value)
                ).rowcount
                == 1
            )

    @retry_conflicts
    def increment_finished(self, batch_id: UUID, succeeded: bool) -> BatchEntity:
        b = s.batches
        column = "succeeded" if succeeded else "failed"
        with self._write("increment_finished") as conn:
            changed = conn.execute(
                sa.update(b).where(b.c.id == batch_id).values({column: b.c[column] + 1})
            ).rowcount
            batch = self._batch(conn, batch_id)
            if not changed or batch is None:
                raise InvalidStateTransitionError(f"batch {batch_id} does not exist")
            return batch

    @retry_conflicts
    def mark_batch_complete_if_ready(self, batch_id: UUID) -> bool:
        b = s.batches
        with self._write("mark_batch_complete_if_ready") as conn:
            stmt = (
                sa.update(b)
                .where(
                    b.c.id == batch_id,
                    b.c.status == BatchStatus.SEALED.value,
                    b.c.succeeded + b.c.failed >= b.c.total,
                )
                .values(status=BatchStatus.COMPLETED.value, completed_at=self._d.now())
            )
            return conn.execute(stmt).rowcount == 1


class WorkflowOperations(SqlBase):
    def save_conditions(self, conditions: Sequence[WorkflowConditionEntity]) -> None:
        if not conditions:
            return
        rows = [condition_to_row(c) for c in conditions]
        with self._write("save_conditions") as conn:
            conn.execute(sa.insert(s.workflow_conditions), rows)

    def find_conditions_by_parent(self, parent_job_id: UUID) -> list[WorkflowConditionEntity]:
        w = s.workflow_conditions
        with self._read("find_conditions_by_parent") as conn:
            rows = conn.execute(
                sa.select(w).where(w.c.parent_job_id == parent_job_id).order_by(w.c.position)
            ).mappings()
            return [row_to_condition(r) for r in rows]

    def delete_conditions_by_parent(self, parent_job_id: UUID) -> int:
        w = s.workflow_conditions
        with self._write("delete_conditions_by_parent") as conn:
            return int(
                conn.execute(sa.delete(w).where(w.c.parent_job_id == parent_job_id)).rowcount
            )


class SignalOperations(SqlBase):
    def _deliver(self, operation: str, where: sa.ColumnElement[bool], payload: str | None) -> int:
        now = self._d.now()
        with self._write(operation) as conn:
            stmt = (
                sa.update(J)
                .where(where, J.c.status == AWAITING)
                .values(
                    status=JobStatus.PENDING.value,
                    scheduled_at=now,
                    signal_payload=payload,
                    updated_at=now,
                )
            )
            return int(conn.execute(stmt).rowcount)

    def deliver_signal_by_id(self, job_id: UUID, payload: str | None) -> bool:
        return self._deliver("deliver_signal_by_id", J.c.id == job_id, payload) == 1

    def deliver_signal_by_key(self, signal_key: str, payload: str | None) -> int:
        return self._deliver("deliver_signal_by_key", J.c.signal_key == signal_key, payload)

    def find_timed_out_signal_jobs(self, limit: int) -> list[JobEntity]:
        stmt = (
            sa.select(J)
            .where(
                J.c.status == AWAITING,
                J.c.signal_deadline.is_not(None),
                J.c.signal_deadline <= self._d.now(),
            )
            .order_by(J.c.signal_deadline, J.c.id)
            .limit(limit)
        )
        with self._read("find_timed_out_signal_jobs") as conn:
            return self._select_jobs(conn, stmt)

    def expire_signal(self, job_id: UUID, error: str, status: JobStatus = JobStatus.FAILED) -> bool:
        status = _expiry_status(status)
        now = self._d.now()
        values: dict[str, Any] = {"status": status.value, "last_error": error, "updated_at": now}
        if status is JobStatus.PENDING:
            values["scheduled_at"] = now
        else:
            values["finished_at"] = now
        with self._write("expire_signal") as conn:
            stmt = sa.update(J).where(J.c.id == job_id, J.c.status == AWAITING).values(**values)
            expired = conn.execute(stmt).rowcount == 1
            if expired and status is not JobStatus.PENDING:
                self._count_batch_child(conn, job_id, False)
            return expired

    def find_jobs_by_signal_key(self, signal_key: str, limit: int) -> list[JobEntity]:
        stmt = (
            sa.select(J)
            .where(J.c.signal_key == signal_key)
            .order_by(J.c.created_at, J.c.id)
            .limit(limit)
        )
        with self._read("find_jobs_by_signal_key") as conn:
            return self._select_jobs(conn, stmt)


def _expiry_status(status: Any) -> JobStatus:
    allowed = (JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.PENDING)
    if status not in allowed:
        raise StoreDataError("status", f"must be FAILED, CANCELLED or PENDING, got {status!r}")
    return JobStatus(status)


class PermitOperations(SqlBase):
    @retry_conflicts
    def try_acquire_permit(
        self, resource_key: str, holder: str, limit: int, ttl: timedelta
    ) -> bool:
        if not holder:
            raise StoreDataError("holder", "must be a non-empty string")
        seconds = _seconds(ttl, "ttl")
        r = s.resource_permits
        d = self._d
        now = d.now()
        with self._write("try_acquire_permit") as conn:
            # Serialize acquirers of one resource on a guard row (BEGIN IMMEDIATE on SQLite).
            # Lock it first; create it only when missing (inserting first would take a shared
            # lock on MariaDB and deadlock the racers).
            guard = (
                sa.select(r.c.holder)
                .where(r.c.resource_key == resource_key, r.c.holder == SENTINEL)
                .with_for_update()
            )
            if conn.execute(guard).first() is None:
                conn.execute(
                    d.insert_ignore(r),
                    [
                        {
                            "resource_key": resource_key,
                            "holder": SENTINEL,
                            "acquired_at": _EPOCH,
                            "expires_at": _EPOCH,
                        }
                    ],
                )
                conn.execute(guard).first()
            refreshed = conn.execute(
                sa.update(r)
                .where(r.c.resource_key == resource_key, r.c.holder == holder, r.c.expires_at > now)
                .values(expires_at=d.now_plus(seconds))
            ).rowcount
            if refreshed:
                return True
            conn.execute(
                sa.delete(r).where(
                    r.c.resource_key == resource_key,
                    r.c.holder != SENTINEL,
                    r.c.expires_at <= now,
                )
            )
            live = conn.execute(
                sa.select(sa.func.count())
                .select_from(r)
                .where(r.c.resource_key == resource_key, r.c.holder != SENTINEL)
            ).scalar_one()
            if live >= limit:
                return False
            conn.execute(
                sa.insert(r).values(
                    resource_key=resource_key,
                    holder=holder,
                    acquired_at=now,
                    expires_at=d.now_plus(seconds),
                )
            )
            return True

    @retry_conflicts
    def release_permit(self, resource_key: str, holder: str) -> bool:
        if not holder:
            return False
        r = s.resource_permits
        with self._write("release_permit") as conn:
            return (
                conn.execute(
                    sa.delete(r).where(r.c.resource_key == resource_key, r.c.holder == holder)
                ).rowcount
                == 1
            )

    def count_permits(self, resource_key: str) -> int:
        r = s.resource_permits
        with self._read("count_permits") as conn:
            return int(
                conn.execute(
                    sa.select(sa.func.count())
                    .select_from(r)
                    .where(
                        r.c.resource_key == resource_key,
                        r.c.holder != SENTINEL,
                        r.c.expires_at > self._d.now(),
                    )
                ).scalar_one()
            )


class FlowControlOperations(SqlBase):
    if TYPE_CHECKING:

        def _fenced(
            self,
            operation: str,
            job_id: UUID,
            claim_seq: int,
            values: dict[str, Any],
            *,
            finishes: bool | None = None,
        ) -> bool: ...

    def defer_claim(self, job_id: UUID, claim_seq: int, run_at: datetime) -> bool:
        require_utc(run_at, "run_at")
        return self._fenced(
            "defer_claim",
            job_id,
            claim_seq,
            {
                "status": JobStatus.PENDING.value,
                "scheduled_at": run_at,
                "attempt": sa.case((J.c.attempt > 0, J.c.attempt - 1), else_=0),
                "owner": None,
                "started_at": None,
                "heartbeat_at": None,
            },
        )

    @retry_conflicts
    def acquire_rate(self, key: str, limit: int, per: timedelta) -> timedelta:
        if not key or len(key) > s.KEY:
            raise StoreDataError("key", f"must be 1 to {s.KEY} characters")
        if limit < 1:
            raise StoreDataError("limit", f"must be at least 1, got {limit}")
        seconds = _seconds(per, "per")
        if seconds <= 0:
            raise StoreDataError("per", f"must be positive, got {per}")
        rate = limit / seconds
        r = s.rate_limits
        with self._write("acquire_rate") as conn:
            pick = sa.select(r.c.tokens, r.c.refreshed_at).where(r.c.key == key).with_for_update()
            row = conn.execute(pick).first()
            if row is None:
                # a new bucket starts full; racers insert once, then all lock the row
                now = conn.execute(sa.select(self._d.now())).scalar_one()
                conn.execute(
                    self._d.insert_ignore(r), [{"key": key, "tokens": limit, "refreshed_at": now}]
                )
                row = conn.execute(pick).one()
            tokens, refreshed_at = row
            # the clock is read once the row is locked (a statement's clock is its start, and a
            # time read before waiting for the lock would refill the same interval twice)
            now = max(refreshed_at, conn.execute(sa.select(self._d.now())).scalar_one())
            elapsed = (now - refreshed_at).total_seconds()
            tokens = min(float(limit), tokens + elapsed * rate)
            wait = 0.0
            if tokens >= 1.0:
                tokens -= 1.0
            else:
                wait = (1.0 - tokens) / rate
            conn.execute(sa.update(r).where(r.c.key == key).values(tokens=tokens, refreshed_at=now))
        return timedelta(seconds=wait)


class LockOperations(SqlBase):
    @retry_conflicts
    def try_lock(self, name: str, owner: str, ttl: timedelta) -> bool:
        seconds = _seconds(ttl, "ttl")
        if not owner:
            raise StoreDataError("owner", "must be a non-empty string")
        lk = s.locks
        d = self._d
        now = d.now()
        with self._independent("try_lock") as conn:
            # Take over an expired lease or refresh our own: the WHERE is re-checked under the
            # row lock, so at most one racer wins. Insert only when no lease row exists.
            stmt = (
                sa.update(lk)
                .where(lk.c.name == name, sa.or_(lk.c.owner == owner, lk.c.expires_at <= now))
                .ordered_values(
                    (lk.c.acquired_at, sa.case((lk.c.owner == owner, lk.c.acquired_at), else_=now)),
                    (lk.c.expires_at, d.now_plus(seconds)),
                    (lk.c.owner, owner),
                )
            )
            if conn.execute(stmt).rowcount == 1:
                return True
            inserted = d.insert_ignored_count(
                conn,
                d.insert_ignore(lk).values(
                    name=name, owner=owner, acquired_at=now, expires_at=d.now_plus(seconds)
                ),
                lk,
            )
            return bool(inserted == 1)

    @retry_conflicts
    def unlock(self, name: str, owner: str) -> bool:
        lk = s.locks
        with self._independent("unlock") as conn:
            return (
                conn.execute(sa.delete(lk).where(lk.c.name == name, lk.c.owner == owner)).rowcount
                == 1
            )

    @retry_conflicts
    def renew_lock(self, name: str, owner: str, ttl: timedelta) -> bool:
        seconds = _seconds(ttl, "ttl")
        lk = s.locks
        d = self._d
        with self._independent("renew_lock") as conn:
            stmt = (
                sa.update(lk)
                .where(lk.c.name == name, lk.c.owner == owner, lk.c.expires_at > d.now())
                .values(expires_at=d.now_plus(seconds))
            )
            return conn.execute(stmt).rowcount == 1

    def find_lock(self, name: str) -> LockEntity | None:
        with self._read("find_lock") as conn:
            row = conn.execute(sa.select(s.locks).where(s.locks.c.name == name)).mappings().first()
            return row_to_lock(row) if row is not None else None


def _terminal_values(statuses: Collection[JobStatus] | None) -> list[str]:
    """The status values an archive call may move (every terminal one for None)."""
    if statuses is None:
        return TERMINAL
    chosen = {JobStatus(x) for x in statuses}
    wrong = sorted(x.value for x in chosen - TERMINAL_STATUSES)
    if wrong:
        raise StoreDataError("statuses", f"only terminal statuses are archived, got {wrong}")
    return sorted(x.value for x in chosen)


class ArchiveOperations(SqlBase):
    def _archive(self, conn: sa.Connection, ids: Sequence[UUID]) -> int:
        rows = list(
            conn.execute(
                sa.select(J).where(J.c.id.in_(ids), J.c.status.in_(TERMINAL)).with_for_update()
            ).mappings()
        )
        if not rows:
            return 0
        found = [r["id"] for r in rows]
        tags = self._tags_for(conn, found)
        props: dict[UUID, dict[str, str]] = {}
        for job_id, key, value in conn.execute(
            sa.select(P.c.job_id, P.c.key, P.c.value).where(P.c.job_id.in_(found))
        ):
            props.setdefault(job_id, {})[key] = value
        states: dict[UUID, dict[str, Any]] = {}
        for job_id, ns, text, version in conn.execute(
            sa.select(ST.c.job_id, ST.c.namespace, ST.c.json, ST.c.version).where(
                ST.c.job_id.in_(found)
            )
        ):
            states.setdefault(job_id, {})[ns] = {"json": text, "version": version}
        now = self._d.now()
        archived = []
        for r in rows:
            row = {k: r[k] for k in JOB_FIELDS}
            row["tags"] = json.dumps(sorted(tags.get(r["id"], [])))
            row["properties"] = json.dumps(props.get(r["id"], {}), sort_keys=True)
            row["state"] = json.dumps(states.get(r["id"], {}), sort_keys=True)
            archived.append(row)
        stamp = conn.execute(sa.select(now)).scalar_one()
        for row in archived:
            row["archived_at"] = stamp
        conn.execute(sa.insert(A), archived)
        for table in (T, P, ST):
            conn.execute(sa.delete(table).where(table.c.job_id.in_(found)))
        conn.execute(sa.delete(J).where(J.c.id.in_(found)))
        return len(found)

    def archive_job(self, job_id: UUID) -> bool:
        with self._write("archive_job") as conn:
            return self._archive(conn, [job_id]) == 1

    def archive_finished_before(
        self, cutoff: datetime, limit: int, statuses: Collection[JobStatus] | None = None
    ) -> int:
        require_utc(cutoff, "cutoff")
        wanted = _terminal_values(statuses)
        if limit <= 0 or not wanted:
            return 0
        with self._write("archive_finished_before") as conn:
            ids = list(
                conn.execute(
                    sa.select(J.c.id)
                    .where(J.c.status.in_(wanted), J.c.finished_at < cutoff)
                    .order_by(J.c.finished_at, J.c.id)
                    .limit(limit)
                ).scalars()
            )
            return sum(self._archive(conn, part) for part in chunks(ids))

    def delete_archived_before(self, cutoff: datetime, limit: int) -> int:
        require_utc(cutoff, "cutoff")
        if limit <= 0:
            return 0
        with self._write("delete_archived_before") as conn:
            ids = list(
                conn.execute(
                    sa.select(A.c.id)
                    .where(A.c.finished_at < cutoff)
                    .order_by(A.c.finished_at, A.c.id)
                    .limit(limit)
                ).scalars()
            )
            count = 0
            for part in chunks(ids):
                for table in (s.executions, s.job_logs):
                    conn.execute(sa.delete(table).where(table.c.job_id.in_(part)))
                count += conn.execute(sa.delete(A).where(A.c.id.in_(part))).rowcount
            return count

    @staticmethod
    def _from_archive(row: sa.RowMapping) -> JobEntity:
        try:
            tags = json.loads(row["tags"])
        except ValueError:
            raise StoreDataError("tags", "archived tags are not JSON", job_id=row["id"]) from None
        return row_to_job(row, tags)

    def find_archived_job(self, job_id: UUID) -> JobEntity | None:
        with self._read("find_archived_job") as conn:
            row = conn.execute(sa.select(A).where(A.c.id == job_id)).mappings().first()
            return self._from_archive(row) if row is not None else None

    def find_archived_jobs(self, limit: int, offset: int = 0) -> list[JobEntity]:
        stmt = (
            sa.select(A).order_by(A.c.finished_at.desc(), A.c.id.desc()).limit(limit).offset(offset)
        )
        with self._read("find_archived_jobs") as conn:
            return [self._from_archive(r) for r in conn.execute(stmt).mappings()]


class QueryOperations(SqlBase):
    def _filters(self, query: JobQuery) -> list[sa.ColumnElement[bool]]:
        require_utc(query.created_after, "created_after")
        require_utc(query.created_before, "created_before")
        where: list[sa.ColumnElement[bool]] = []
        if query.statuses is not None:
            where.append(J.c.status.in_(sorted(JobStatus(x).value for x in query.statuses)))
        if query.target is not None:
            where.append(J.c.target == query.target)
        if query.tag is not None:
            where.append(sa.exists().where(T.c.job_id == J.c.id, T.c.tag == query.tag))
        if query.job_type is not None:
            where.append(J.c.job_type == query.job_type.value)
        if query.parent_id is not None:
            where.append(J.c.parent_id == query.parent_id)
        if query.batch_id is not None:
            where.append(J.c.batch_id == query.batch_id)
        if query.created_after is not None:
            where.append(J.c.created_at >= query.created_after)
        if query.created_before is not None:
            where.append(J.c.created_at < query.created_before)
        for key, value in sorted(query.properties.items()):
            where.append(
                sa.exists().where(P.c.job_id == J.c.id, P.c.key == key, P.c.value == value)
            )
        return where

    def search_jobs(self, query: JobQuery) -> list[JobEntity]:
        if query.order is SortOrder.NEWEST_FIRST:
            order = (J.c.created_at.desc(), J.c.id.desc())
        else:
            order = (J.c.created_at.asc(), J.c.id.asc())
        stmt = (
            sa.select(J)
            .where(*self._filters(query))
            .order_by(*order)
            .limit(query.limit)
            .offset(query.offset)
        )
        with self._read("search_jobs") as conn:
            return self._select_jobs(conn, stmt)

    def count_jobs(self, query: JobQuery) -> int:
        stmt = sa.select(sa.func.count()).select_from(J).where(*self._filters(query))
        with self._read("count_jobs") as conn:
            return int(conn.execute(stmt).scalar_one())

    def find_job_ids_by_tag(self, tag: str, limit: int) -> list[UUID]:
        stmt = sa.select(T.c.job_id).where(T.c.tag == tag).order_by(T.c.job_id).limit(limit)
        with self._read("find_job_ids_by_tag") as conn:
            return list(conn.execute(stmt).scalars())


class AnalyticsOperations(SqlBase):
    def count_jobs_by_status(self) -> dict[JobStatus, int]:
        counts = dict.fromkeys(JobStatus, 0)
        with self._read("count_jobs_by_status") as conn:
            for status, n in conn.execute(
                sa.select(J.c.status, sa.func.count()).group_by(J.c.status)
            ):
                counts[JobStatus(status)] = int(n)
        return counts

    def count_finished_since(self, since: datetime) -> dict[JobStatus, int]:
        require_utc(since, "since")
        counts = {x: 0 for x in JobStatus if x.is_terminal}
        with self._read("count_finished_since") as conn:
            for status, n in conn.execute(
                sa.select(J.c.status, sa.func.count())
                .where(J.c.status.in_(TERMINAL), J.c.finished_at >= since)
                .group_by(J.c.status)
            ):
                counts[JobStatus(status)] = int(n)
        return counts

    def _percentile(
        self,
        operation: str,
        percentile: float,
        start: sa.ColumnElement[datetime],
        end: sa.ColumnElement[datetime],
        where: Sequence[sa.ColumnElement[bool]],
    ) -> timedelta | None:
        if not 0 <= percentile <= 100:
            raise StoreDataError("percentile", f"must be between 0 and 100, got {percentile}")
        # Rank in SQL by the dialect's duration; compute the chosen row's duration exactly
        # from its two datetimes (SQLite's julianday arithmetic is off by microseconds).
        duration = self._d.seconds_between(start, end)
        with self._read(operation) as conn:
            n = conn.execute(sa.select(sa.func.count()).select_from(J).where(*where)).scalar_one()
            if not n:
                return None
            rank = max(1, math.ceil(percentile / 100 * n))
            row = conn.execute(
                sa.select(start, end)
                .where(*where)
                .order_by(duration, J.c.id)
                .offset(rank - 1)
                .limit(1)
            ).one()
        return row[1] - row[0]

    def execution_time_percentile(self, percentile: float, since: datetime) -> timedelta | None:
        require_utc(since, "since")
        return self._percentile(
            "execution_time_percentile",
            percentile,
            J.c.started_at,
            J.c.finished_at,
            [
                J.c.status == JobStatus.SUCCEEDED.value,
                J.c.finished_at >= since,
                J.c.started_at.is_not(None),
            ],
        )

    def queue_wait_percentile(self, percentile: float, since: datetime) -> timedelta | None:
        require_utc(since, "since")
        return self._percentile(
            "queue_wait_percentile",
            percentile,
            J.c.scheduled_at,
            J.c.started_at,
            [J.c.started_at.is_not(None), J.c.started_at >= since],
        )


_PG_EXECUTION_COLUMNS = {
    "id": "uuid",
    "job_id": "uuid",
    "attempt": "integer",
    "node_id": "text",
    "status": "text",
    "started_at": "timestamp",
    "finished_at": "timestamp",
    "duration_ms": "bigint",
    "error": "text",
    "traceback": "text",
    "superseded": "boolean",
}
_PG_STAMPS = {"started_at", "finished_at"}
_PG_SAVE_EXECUTIONS = sa.text(
    f"INSERT INTO {s.executions.name} ({', '.join(_PG_EXECUTION_COLUMNS)}) SELECT * FROM unnest("
    + ", ".join(f"CAST(:{k} AS {v}[])" for k, v in _PG_EXECUTION_COLUMNS.items())
    + ") ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{k} = excluded.{k}" for k in _PG_EXECUTION_COLUMNS if k != "id")
)


class AuditOperations(SqlBase):
    def save_execution(self, record: ExecutionRecord) -> None:
        values = execution_to_row(record)
        update = {k: v for k, v in values.items() if k != "id"}
        with self._write("save_execution") as conn:
            conn.execute(self._d.upsert(s.executions, values, ["id"], update))

    def save_executions(self, records: Sequence[ExecutionRecord]) -> None:
        if not records:
            return
        rows = [execution_to_row(r) for r in records]
        if self._d.is_pg:
            # one statement whatever the number of records (columns travel as arrays), so it
            # runs in autocommit: one round trip
            arrays = {
                k: [r[k].replace(tzinfo=None) if k in _PG_STAMPS and r[k] else r[k] for r in rows]
                for k in _PG_EXECUTION_COLUMNS
            }
            with self._write_statement("save_executions") as conn:
                conn.execute(_PG_SAVE_EXECUTIONS, arrays)
            return
        stmt = self._d.upsert_many(s.executions, ["id"], [k for k in rows[0] if k != "id"])
        with self._write("save_executions") as conn:
            conn.execute(stmt, rows)

    def find_executions_by_job_id(self, job_id: UUID) -> list[ExecutionRecord]:
        e = s.executions
        with self._read("find_executions_by_job_id") as conn:
            rows = conn.execute(
                sa.select(e).where(e.c.job_id == job_id).order_by(e.c.attempt, e.c.started_at)
            ).mappings()
            return [row_to_execution(r) for r in rows]

    def append_logs(self, lines: Sequence[JobLogLine]) -> None:
        if not lines:
            return
        rows = [log_to_row(x) for x in lines]
        with self._write("append_logs") as conn:
            conn.execute(sa.insert(s.job_logs), rows)

    def find_logs_by_job_id(self, job_id: UUID, limit: int = 1000) -> list[JobLogLine]:
        lg = s.job_logs
        with self._read("find_logs_by_job_id") as conn:
            rows = conn.execute(
                sa.select(lg).where(lg.c.job_id == job_id).order_by(lg.c.id).limit(limit)
            ).mappings()
            return [row_to_log(r) for r in rows]


class ExtensionOperations(SqlBase):
    def _require_job(self, conn: sa.Connection, job_id: UUID) -> None:
        if conn.execute(sa.select(J.c.id).where(J.c.id == job_id)).first() is None:
            raise JobNotFoundError(job_id)

    def put_property(self, job_id: UUID, key: str, value: str) -> bool:
        if not key:
            raise StoreDataError("key", "must be a non-empty string")
        if len(key) > s.KEY:
            raise StoreDataError("key", f"is {len(key)} characters, the limit is {s.KEY}")
        with self._write("put_property") as conn:
            self._require_job(conn, job_id)
            stmt = self._d.insert_ignore(P).values(job_id=job_id, key=key, value=value)
            return self._d.insert_ignored_count(conn, stmt, P) == 1

    @staticmethod
    def _archived(conn: sa.Connection, job_id: UUID, column: str) -> dict[str, Any]:
        """Properties or state of an archived job (kept as JSON on its archive row)."""
        text = conn.execute(sa.select(A.c[column]).where(A.c.id == job_id)).scalar_one_or_none()
        if text is None:
            return {}
        try:
            value = json.loads(text)
        except ValueError:
            raise StoreDataError(column, "archived value is not JSON", job_id=job_id) from None
        return dict(value)

    def get_property(self, job_id: UUID, key: str) -> str | None:
        with self._read("get_property") as conn:
            value = conn.execute(
                sa.select(P.c.value).where(P.c.job_id == job_id, P.c.key == key)
            ).scalar_one_or_none()
            if value is None:
                value = self._archived(conn, job_id, "properties").get(key)
            return None if value is None else str(value)

    def get_properties_by_prefix(self, job_id: UUID, prefix: str) -> dict[str, str]:
        with self._read("get_properties_by_prefix") as conn:
            rows: list[tuple[Any, Any]] = list(
                conn.execute(
                    sa.select(P.c.key, P.c.value).where(
                        P.c.job_id == job_id, P.c.key.startswith(prefix, autoescape=True)
                    )
                )
            )
            if not rows:
                rows = list(self._archived(conn, job_id, "properties").items())
            return {k: v for k, v in rows if k.startswith(prefix)}

    def get_state(self, job_id: UUID, namespace: str) -> VersionedState | None:
        with self._read("get_state") as conn:
            row = conn.execute(
                sa.select(ST.c.json, ST.c.version).where(
                    ST.c.job_id == job_id, ST.c.namespace == namespace
                )
            ).first()
            if row is not None:
                return VersionedState(json=row[0], version=row[1])
            archived = self._archived(conn, job_id, "state").get(namespace)
            if archived is None:
                return None
            return VersionedState(json=archived["json"], version=archived["version"])

    def _fence_ok(self, conn: sa.Connection, job_id: UUID, claim_seq: int | None) -> bool:
        row = conn.execute(
            sa.select(J.c.status, J.c.claim_seq).where(J.c.id == job_id).with_for_update()
        ).first()
        if row is None:
            raise JobNotFoundError(job_id)
        if claim_seq is None:
            return True
        return bool(row[0] == JobStatus.RUNNING.value and row[1] == claim_seq)

    def init_state(
        self, job_id: UUID, namespace: str, state: str, expected_claim_seq: int | None = None
    ) -> StateWriteResult:
        if not namespace or len(namespace) > s.KEY:
            raise StoreDataError("namespace", f"must be 1 to {s.KEY} characters")
        with self._write("init_state") as conn:
            if not self._fence_ok(conn, job_id, expected_claim_seq):
                return StateWriteResult.SUPERSEDED
            stmt = self._d.insert_ignore(ST).values(
                job_id=job_id, namespace=namespace, json=state, version=0
            )
            if self._d.insert_ignored_count(conn, stmt, ST) == 1:
                return StateWriteResult.UPDATED
            return StateWriteResult.VERSION_CONFLICT

    def update_state(
        self,
        job_id: UUID,
        namespace: str,
        state: str,
        expected_version: int,
        expected_claim_seq: int | None = None,
    ) -> StateWriteResult:
        with self._write("update_state") as conn:
            if not self._fence_ok(conn, job_id, expected_claim_seq):
                return StateWriteResult.SUPERSEDED
            stmt = (
                sa.update(ST)
                .where(
                    ST.c.job_id == job_id,
                    ST.c.namespace == namespace,
                    ST.c.version == expected_version,
                )
                .values(json=state, version=ST.c.version + 1)
            )
            if conn.execute(stmt).rowcount == 1:
                return StateWriteResult.UPDATED
            return StateWriteResult.VERSION_CONFLICT

    def properties_for_jobs(self, job_ids: Sequence[UUID]) -> Mapping[UUID, dict[str, str]]:
        found: dict[UUID, dict[str, str]] = {}
        with self._read("properties_for_jobs") as conn:
            for part in chunks(list(job_ids)):
                for job_id, key, value in conn.execute(
                    sa.select(P.c.job_id, P.c.key, P.c.value).where(P.c.job_id.in_(part))
                ):
                    found.setdefault(job_id, {})[key] = value
        return found


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

__all__ = [
    "AnalyticsOperations",
    "ArchiveOperations",
    "AuditOperations",
    "BatchOperations",
    "ExtensionOperations",
    "LockOperations",
    "PermitOperations",
    "QueryOperations",
    "RecurringOperations",
    "SignalOperations",
    "WorkflowOperations",
]
