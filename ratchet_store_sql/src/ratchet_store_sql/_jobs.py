"""The mandatory store sub-protocols: crud, claim, terminal, retry, pause, batch status, bulk,
nodes and tags."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from ratchet_api.errors import DuplicateJobError, JobNotFoundError, StoreDataError
from ratchet_api.model import TERMINAL_STATUSES, JobStatus, NodeTagFilter
from ratchet_api.store.entities import (
    ChildSettlement,
    Completion,
    JobEntity,
    NodeEntity,
)
from ratchet_api.store.fairness import fair_claim_order, plain_claim_key
from ratchet_store_sql import schema as s
from ratchet_store_sql._base import CHUNK, SqlBase, chunks, retry_conflicts
from ratchet_store_sql._convert import (
    job_to_row,
    node_to_row,
    require_utc,
    row_to_node,
)
from ratchet_store_sql._dialects.base import check_tags
from ratchet_store_sql._errors import ConnectionLostError

J = s.jobs
T = s.job_tags
PENDING = JobStatus.PENDING.value
_log = logging.getLogger("ratchet.store")
RUNNING = JobStatus.RUNNING.value
TERMINAL = sorted(x.value for x in TERMINAL_STATUSES)


def _seconds(value: timedelta, field: str) -> float:
    if not isinstance(value, timedelta):
        raise StoreDataError(field, f"expected a timedelta, got {type(value).__name__}")
    return value.total_seconds()


def claim_ordered(claimed: list[JobEntity]) -> list[JobEntity]:
    """Claimed jobs in claim order: the fair order when any has a fairness key (the plain
    order otherwise, which the fair one equals for unkeyed jobs)."""
    if any(job.fairness_key is not None for job in claimed):
        return fair_claim_order(claimed)
    claimed.sort(key=plain_claim_key)
    return claimed


def _same_job(stored: JobEntity, job: JobEntity) -> bool:
    """The stored row is ``job`` (written by an attempt whose outcome was lost)."""
    return (stored.target, stored.payload, stored.idempotency_key) == (
        job.target,
        job.payload,
        job.idempotency_key,
    )


def claim_jobs(
    store: SqlBase,
    node_id: str,
    limit: int,
    execution_targets: Sequence[str] | None,
    tag_filter: NodeTagFilter | None,
    *,
    start: int,
) -> list[JobEntity]:
    """The claim of ``claim_next_batch`` (``start`` 0) and ``claim_and_start``, in claim
    order: straight on the driver where the dialect can (``claim_alone``), else one statement
    on a connection of the store (autocommit on PostgreSQL: one round trip)."""
    claimed = store._d.claim_alone(
        store, node_id, limit, execution_targets, tag_filter, start=start
    )
    if claimed is None:
        with store._write_statement("claim_next_batch") as conn:
            claimed = store._d.claim(
                conn, node_id, limit, execution_targets, tag_filter, start=start
            )
    return claim_ordered(claimed)


def bulk_duplicate(exc: sa.exc.IntegrityError) -> DuplicateJobError:
    """A bulk insert's integrity error: a job id (or, past the store's checks, a key) exists."""
    return DuplicateJobError(
        f"bulk_insert: a job id or idempotency key already exists ({exc.orig})"
    )


class JobOperations(SqlBase):
    """Implements ``ratchet_api.store.JobStore`` (every mandatory sub-protocol)."""

    # ------------------------------------------------------------------ crud

    def insert_job(self, job: JobEntity) -> JobEntity:
        check_tags(job.tags, job.id)
        if job.fairness_key is not None:
            self._d.note_keyed((job,))
        if self._bound is not None:
            return self._insert_job_once(job)
        try:
            return self._insert_job_once(job)
        except ConnectionLostError:
            # The connection broke under the insert (its own transaction, or one autocommit
            # statement): it either committed whole or not at all. Send it again on a fresh
            # connection; if the first one did commit, the job's id is taken by this very job.
            pass
        try:
            return self._insert_job_once(job)
        except DuplicateJobError:
            stored = self.find_by_id(job.id)
            if stored is not None and _same_job(stored, job):
                return stored
            raise

    def _insert_job_once(self, job: JobEntity) -> JobEntity:
        return self._d.insert_job(self, job)

    def find_by_id(self, job_id: UUID) -> JobEntity | None:
        with self._read("find_by_id") as conn:
            return self._find_one(conn, J.c.id == job_id)

    def find_by_idempotency_key(self, key: str) -> JobEntity | None:
        with self._read("find_by_idempotency_key") as conn:
            return self._find_one(conn, J.c.idempotency_key == key)

    def update_job(self, job: JobEntity) -> JobEntity:
        row = job_to_row(job)
        self._d.note_keyed((job,))
        check_tags(job.tags, job.id)
        del row["id"]
        row["updated_at"] = self._d.now()
        with self._write("update_job") as conn:
            if conn.execute(sa.update(J).where(J.c.id == job.id).values(**row)).rowcount == 0:
                raise JobNotFoundError(job.id)
            conn.execute(sa.delete(T).where(T.c.job_id == job.id))
            if job.tags:
                conn.execute(sa.insert(T), [{"job_id": job.id, "tag": t} for t in set(job.tags)])
            stored = self._find_one(conn, J.c.id == job.id)
        assert stored is not None
        return stored

    def delete_job(self, job_id: UUID) -> bool:
        with self._write("delete_job") as conn:
            for table in (T, s.job_properties, s.job_state):
                conn.execute(sa.delete(table).where(table.c.job_id == job_id))
            conn.execute(sa.delete(s.executions).where(s.executions.c.job_id == job_id))
            conn.execute(sa.delete(s.job_logs).where(s.job_logs.c.job_id == job_id))
            return bool(conn.execute(sa.delete(J).where(J.c.id == job_id)).rowcount)

    # ------------------------------------------------------------------ claim

    def claim_next_batch(
        self,
        node_id: str,
        limit: int,
        *,
        execution_targets: Sequence[str] | None = None,
        tag_filter: NodeTagFilter | None = None,
    ) -> list[JobEntity]:
        if limit <= 0:
            return []
        return claim_jobs(self, node_id, limit, execution_targets, tag_filter, start=0)

    def claims_fairly(self) -> bool:
        """``FairClaimStore``: while any PENDING job has a fairness key, claims rank each
        key's first due jobs within their ``(priority, fairness_key)`` group, add the key's
        RUNNING jobs, and take them by priority, rank, due time, id
        (``_dialects.base.fair_candidates``; PostgreSQL in one statement, ``pg_fair``)."""
        return True

    def mark_dispatched(self, claims: Mapping[UUID, int]) -> set[UUID]:
        if not claims:
            return set()
        return self._d.mark_dispatched(self, list(claims.items()))

    # ------------------------------------------------------------------ fenced writes

    def _fenced(
        self,
        operation: str,
        job_id: UUID,
        claim_seq: int,
        values: dict[str, Any],
        extra: sa.ColumnElement[bool] | None = None,
        *,
        finishes: bool | None = None,
    ) -> bool:
        """A fenced update of one RUNNING job (``extra``: one more condition). ``finishes``
        (True: succeeded, False: failed) marks a terminal write, which also counts the job in
        its batch in the same transaction."""
        values.setdefault("updated_at", self._d.now())
        where = [
            J.c.id == job_id,
            J.c.claim_seq == claim_seq,
            self._d.unindexed(J.c.status) == RUNNING,
        ]
        if extra is not None:
            where.append(extra)
        write = self._write_statement if finishes is None else self._write
        with write(operation) as conn:
            stmt = sa.update(J).where(*where).values(**values)
            applied = conn.execute(stmt).rowcount == 1
            if applied and finishes is not None:
                self._count_batch_child(conn, job_id, finishes)
            return applied

    def mark_succeeded(self, job_id: UUID, claim_seq: int, result: str | None) -> bool:
        now = self._d.now()
        return self._fenced(
            "mark_succeeded",
            job_id,
            claim_seq,
            {
                "status": JobStatus.SUCCEEDED.value,
                "result": result,
                "finished_at": now,
                "owner": None,
            },
            finishes=True,
        )

    def mark_succeeded_many(self, completions: Sequence[Completion]) -> set[UUID]:
        if not completions:
            return set()
        latest: dict[UUID, Completion] = {c.job_id: c for c in completions}
        if len(latest) <= CHUNK:
            alone = self._d.succeed_alone(self, list(latest.values()))
            if alone is not None:
                return alone
        applied: set[UUID] = set()
        now = self._d.now()
        # one statement per chunk: a single chunk on PostgreSQL runs in autocommit
        write = self._write_statement if len(latest) <= CHUNK else self._write
        with write("mark_succeeded_many") as conn:
            for part in chunks(list(latest.values())):
                applied |= self._d.succeed_chunk(conn, part, now)
        return applied

    def mark_failed_terminal(self, job_id: UUID, claim_seq: int, error: str) -> bool:
        return self._fenced(
            "mark_failed_terminal",
            job_id,
            claim_seq,
            {
                "status": JobStatus.FAILED.value,
                "last_error": error,
                "finished_at": self._d.now(),
                "owner": None,
            },
            finishes=False,
        )

    @retry_conflicts
    def cancel_job(self, job_id: UUID) -> bool:
        now = self._d.now()
        with self._write("cancel_job") as conn:
            stmt = (
                sa.update(J)
                .where(J.c.id == job_id, J.c.status.not_in(TERMINAL))
                .values(
                    status=JobStatus.CANCELLED.value,
                    finished_at=now,
                    updated_at=now,
                    owner=None,
                )
            )
            cancelled = conn.execute(stmt).rowcount == 1
            if cancelled:
                self._count_batch_child(conn, job_id, False)
            return cancelled

    # ------------------------------------------------------------------ retry

    def schedule_retry(self, job_id: UUID, claim_seq: int, run_at: datetime, error: str) -> bool:
        require_utc(run_at, "run_at")
        return self._fenced(
            "schedule_retry",
            job_id,
            claim_seq,
            {"status": PENDING, "scheduled_at": run_at, "last_error": error, "owner": None},
        )

    def retry_dead_letter(self, job_id: UUID, run_at: datetime | None = None) -> bool:
        require_utc(run_at, "run_at")
        now = self._d.now()
        with self._write("retry_dead_letter") as conn:
            stmt = (
                sa.update(J)
                .where(J.c.id == job_id, J.c.status == JobStatus.FAILED.value)
                .values(
                    status=PENDING,
                    scheduled_at=run_at if run_at is not None else now,
                    attempt=0,
                    finished_at=None,
                    owner=None,
                    updated_at=now,
                )
            )
            return conn.execute(stmt).rowcount == 1

    # ------------------------------------------------------------------ pause

    def _swap(self, operation: str, job_id: UUID, old: str, new: str, **extra: Any) -> bool:
        with self._write(operation) as conn:
            stmt = (
                sa.update(J)
                .where(J.c.id == job_id, J.c.status == old)
                .values(status=new, updated_at=self._d.now(), **extra)
            )
            return conn.execute(stmt).rowcount == 1

    def pause_job(self, job_id: UUID) -> bool:
        return self._swap("pause_job", job_id, PENDING, JobStatus.PAUSED.value)

    def resume_job(self, job_id: UUID) -> bool:
        return self._swap("resume_job", job_id, JobStatus.PAUSED.value, PENDING)

    # ------------------------------------------------------------------ batch status

    def compare_and_swap_status(self, job_id: UUID, expected: JobStatus, new: JobStatus) -> bool:
        expected_s = JobStatus(expected).value
        new_s = JobStatus(new).value
        extra: dict[str, Any] = {}
        if JobStatus(new).is_terminal:
            extra["finished_at"] = self._d.now()
        if JobStatus(new) is not JobStatus.RUNNING:
            extra["owner"] = None
        return self._swap("compare_and_swap_status", job_id, expected_s, new_s, **extra)

    def release_claim(
        self,
        job_id: UUID,
        claim_seq: int,
        *,
        run_at: datetime | None = None,
        unless_dispatched: bool = False,
    ) -> bool:
        require_utc(run_at, "run_at")
        values: dict[str, Any] = {
            "status": PENDING,
            "attempt": sa.case((J.c.attempt > 0, J.c.attempt - 1), else_=0),
            "owner": None,
            "started_at": None,
            "heartbeat_at": None,
            "dispatched_at": None,
        }
        if run_at is not None:
            values["scheduled_at"] = run_at
        return self._fenced(
            "release_claim",
            job_id,
            claim_seq,
            values,
            J.c.dispatched_at.is_(None) if unless_dispatched else None,
        )

    @retry_conflicts
    def reset_running_jobs(self, node_id: str) -> int:
        with self._write("reset_running_jobs") as conn:
            stmt = (
                sa.update(J)
                .where(J.c.owner == node_id, J.c.status == RUNNING)
                .values(status=PENDING, owner=None, updated_at=self._d.now())
            )
            return int(conn.execute(stmt).rowcount)

    def find_children(self, parent_id: UUID) -> list[JobEntity]:
        with self._read("find_children") as conn:
            return self._select_jobs(
                conn,
                sa.select(J).where(J.c.parent_id == parent_id).order_by(J.c.created_at, J.c.id),
            )

    def release_waiting_children(self, parent_id: UUID, child_ids: Sequence[UUID]) -> int:
        if not child_ids:
            return 0
        now = self._d.now()
        count = 0
        with self._write("release_waiting_children") as conn:
            for part in chunks(list(child_ids)):
                stmt = (
                    sa.update(J)
                    .where(
                        J.c.parent_id == parent_id,
                        J.c.id.in_(part),
                        J.c.status == JobStatus.WAITING.value,
                    )
                    .values(status=PENDING, scheduled_at=now, updated_at=now)
                )
                count += conn.execute(stmt).rowcount
        return count

    @retry_conflicts
    def settle_children(self, parent_id: UUID, settlements: Sequence[ChildSettlement]) -> set[UUID]:
        if not settlements:
            return set()
        now = self._d.now()
        moved: set[UUID] = set()
        with self._write("settle_children") as conn:
            for item in settlements:
                require_utc(item.signal_deadline, "signal_deadline")
                values: dict[str, Any] = {"status": item.status.value, "updated_at": now}
                if item.status is JobStatus.PENDING:
                    values["scheduled_at"] = now
                elif item.status is JobStatus.AWAITING_SIGNAL:
                    values["signal_deadline"] = item.signal_deadline
                else:
                    values.update(finished_at=now, last_error=item.reason, owner=None)
                stmt = (
                    sa.update(J)
                    .where(
                        J.c.id == item.child_id,
                        J.c.parent_id == parent_id,
                        J.c.status == JobStatus.WAITING.value,
                    )
                    .values(**values)
                )
                if conn.execute(stmt).rowcount == 1:
                    moved.add(item.child_id)
        return moved

    def find_orphaned_children(self, limit: int) -> list[JobEntity]:
        parent = J.alias("parent")
        stmt = (
            sa.select(J)
            .outerjoin(parent, parent.c.id == J.c.parent_id)
            .where(
                J.c.status == JobStatus.WAITING.value,
                J.c.parent_id.is_not(None),
                sa.or_(parent.c.id.is_(None), parent.c.status.in_(TERMINAL)),
            )
            .order_by(J.c.created_at, J.c.id)
            .limit(limit)
        )
        with self._read("find_orphaned_children") as conn:
            return self._select_jobs(conn, stmt)

    # ------------------------------------------------------------------ bulk

    def bulk_insert(self, jobs: Sequence[JobEntity]) -> int:
        if not jobs:
            return 0
        with self._write("bulk_insert") as conn:
            inserted = self._insert_jobs(conn, jobs)
        if self._bound is None:
            self._d.after_bulk_insert(self, inserted)
        return inserted

    def bulk_insert_parts(self, parts: Iterable[Sequence[JobEntity]]) -> int:
        """``StreamingBulkStore``: where the dialect can write while the caller builds the
        next part (PostgreSQL's COPY, outside a caller's transaction) the parts go into one
        COPY as they come; elsewhere every part is read first, before the transaction opens
        (SQLite's write lock is not held while the engine builds jobs), then one
        ``bulk_insert``."""
        if self._bound is not None or not self._d.streams_parts:
            return self.bulk_insert([job for part in parts for job in part])
        with self._write("bulk_insert") as conn:
            try:
                inserted = self._d.insert_parts(conn, parts, self._insert_jobs)
            except sa.exc.IntegrityError as exc:
                raise bulk_duplicate(exc) from exc
        self._d.after_bulk_insert(self, inserted)
        return inserted

    def _insert_jobs(self, conn: sa.Connection, jobs: Sequence[JobEntity]) -> int:
        """``bulk_insert`` on the caller's connection (idempotency keys that exist skipped)."""
        # every job is checked and converted, also a duplicate that is then skipped
        self._d.note_keyed(jobs)
        to_row = self._d.bulk_row
        rows: list[tuple[JobEntity, Any]] = []
        keyed: dict[str, JobEntity] = {}
        for job in jobs:
            if job.tags:
                check_tags(job.tags, job.id)
            row = to_row(job)
            if job.idempotency_key is not None:
                if job.idempotency_key in keyed:
                    continue  # a later duplicate of a key in the same batch: skipped
                keyed[job.idempotency_key] = job
            rows.append((job, row))
        if keyed:
            existing: set[str] = set()
            for part in chunks(list(keyed)):
                existing.update(
                    conn.execute(
                        sa.select(J.c.idempotency_key).where(J.c.idempotency_key.in_(part))
                    ).scalars()
                )
            if existing:
                rows = [(job, row) for job, row in rows if job.idempotency_key not in existing]
        if not rows:
            return 0
        tag_rows = [
            {"job_id": job.id, "tag": tag} for job, _ in rows if job.tags for tag in set(job.tags)
        ]
        try:
            self._d.insert_rows(conn, [row for _, row in rows], tag_rows)
        except sa.exc.IntegrityError as exc:
            raise bulk_duplicate(exc) from exc
        return len(rows)

    @retry_conflicts
    def reset_orphan_jobs(self, node_ids: Sequence[str], heartbeat_before: datetime) -> int:
        require_utc(heartbeat_before, "heartbeat_before")
        if not node_ids:
            return 0
        now = self._d.now()
        N = s.nodes
        # The liveness checks are part of the UPDATE itself: a node that heartbeat again, or a
        # job claimed/touched after the cutoff, is never reset (a claim committed concurrently
        # is re-checked on the row's newest version by every backend's UPDATE).
        alive = sa.exists().where(N.c.node_id == J.c.owner, N.c.last_heartbeat >= heartbeat_before)
        count = 0
        with self._write("reset_orphan_jobs") as conn:
            for part in chunks(list(node_ids)):
                stmt = (
                    sa.update(J)
                    .where(
                        J.c.owner.in_(part),
                        J.c.status == RUNNING,
                        sa.or_(J.c.heartbeat_at.is_(None), J.c.heartbeat_at < heartbeat_before),
                        ~alive,
                    )
                    .values(
                        status=PENDING,
                        owner=None,
                        scheduled_at=now,
                        updated_at=now,
                        # a claim that never started gives its attempt back
                        attempt=sa.case(
                            (
                                sa.and_(J.c.dispatched_at.is_(None), J.c.attempt > 0),
                                J.c.attempt - 1,
                            ),
                            else_=J.c.attempt,
                        ),
                        dispatched_at=None,
                    )
                )
                count += conn.execute(stmt).rowcount
        return count

    def find_stale_running_jobs(self, heartbeat_before: datetime, limit: int) -> list[JobEntity]:
        require_utc(heartbeat_before, "heartbeat_before")
        stmt = (
            sa.select(J)
            .where(J.c.status == RUNNING, J.c.heartbeat_at < heartbeat_before)
            .order_by(J.c.heartbeat_at, J.c.id)
            .limit(limit)
        )
        with self._read("find_stale_running_jobs") as conn:
            return self._select_jobs(conn, stmt)

    def touch_running_jobs(self, node_id: str, job_ids: Sequence[UUID]) -> int:
        if not job_ids:
            return 0
        count = 0
        with self._write("touch_running_jobs") as conn:
            for part in chunks(list(job_ids)):
                stmt = (
                    sa.update(J)
                    .where(
                        J.c.id.in_(part),
                        self._d.unindexed(J.c.owner) == node_id,
                        self._d.unindexed(J.c.status) == RUNNING,
                    )
                    .values(heartbeat_at=self._d.now())
                )
                count += conn.execute(stmt).rowcount
        return count

    def delete_dead_letter_older_than(self, cutoff: datetime, limit: int) -> int:
        require_utc(cutoff, "cutoff")
        if limit <= 0:
            return 0
        with self._write("delete_dead_letter_older_than") as conn:
            ids = list(
                conn.execute(
                    sa.select(J.c.id)
                    .where(J.c.status == JobStatus.FAILED.value, J.c.finished_at < cutoff)
                    .order_by(J.c.finished_at)
                    .limit(limit)
                ).scalars()
            )
            count = 0
            for part in chunks(ids):
                for table in (T, s.job_properties, s.job_state, s.executions, s.job_logs):
                    conn.execute(sa.delete(table).where(table.c.job_id.in_(part)))
                count += conn.execute(
                    sa.delete(J).where(J.c.id.in_(part), J.c.status == JobStatus.FAILED.value)
                ).rowcount
            return count

    # ------------------------------------------------------------------ nodes

    def server_now(self) -> datetime:
        with self._read("server_now") as conn:
            value = conn.execute(sa.select(self._d.now())).scalar_one()
        assert isinstance(value, datetime)
        return value

    def upsert_heartbeat(self, node: NodeEntity) -> None:
        values = node_to_row(node)
        now = self._d.now()
        values["last_heartbeat"] = now
        update = {k: v for k, v in values.items() if k not in ("node_id", "started_at")}
        with self._independent("upsert_heartbeat") as conn:
            conn.execute(self._d.upsert(s.nodes, values, ["node_id"], update))

    def find_inactive_nodes(self, timeout: timedelta) -> list[NodeEntity]:
        cutoff = self._d.now_plus(-_seconds(timeout, "timeout"))
        with self._read("find_inactive_nodes") as conn:
            rows = conn.execute(
                sa.select(s.nodes)
                .where(s.nodes.c.last_heartbeat < cutoff)
                .order_by(s.nodes.c.node_id)
            ).mappings()
            return [row_to_node(r) for r in rows]

    def find_all_nodes(self) -> list[NodeEntity]:
        with self._read("find_all_nodes") as conn:
            rows = conn.execute(sa.select(s.nodes).order_by(s.nodes.c.node_id)).mappings()
            return [row_to_node(r) for r in rows]

    @retry_conflicts
    def delete_inactive_nodes(self, timeout: timedelta) -> int:
        cutoff = self._d.now_plus(-_seconds(timeout, "timeout"))
        with self._independent("delete_inactive_nodes") as conn:
            return int(
                conn.execute(sa.delete(s.nodes).where(s.nodes.c.last_heartbeat < cutoff)).rowcount
            )

    @retry_conflicts
    def delete_nodes_by_ids(self, node_ids: Sequence[str]) -> int:
        if not node_ids:
            return 0
        count = 0
        with self._independent("delete_nodes_by_ids") as conn:
            for part in chunks(list(node_ids)):
                count += conn.execute(
                    sa.delete(s.nodes).where(s.nodes.c.node_id.in_(part))
                ).rowcount
        return count

    # ------------------------------------------------------------------ tags

    def insert_tags(self, job_id: UUID, tags: Sequence[str]) -> None:
        check_tags(tags, job_id)
        if not tags:
            with self._read("insert_tags") as conn:
                if conn.execute(sa.select(J.c.id).where(J.c.id == job_id)).first() is None:
                    raise JobNotFoundError(job_id)
            return
        with self._write("insert_tags") as conn:
            if conn.execute(sa.select(J.c.id).where(J.c.id == job_id)).first() is None:
                raise JobNotFoundError(job_id)
            conn.execute(
                self._d.insert_ignore(T), [{"job_id": job_id, "tag": t} for t in sorted(set(tags))]
            )

    def delete_tags_by_job_id(self, job_id: UUID) -> int:
        with self._write("delete_tags_by_job_id") as conn:
            return int(conn.execute(sa.delete(T).where(T.c.job_id == job_id)).rowcount)

    def find_tags(self, job_id: UUID) -> list[str]:
        with self._read("find_tags") as conn:
            return sorted(conn.execute(sa.select(T.c.tag).where(T.c.job_id == job_id)).scalars())


__all__ = ["JobOperations"]
