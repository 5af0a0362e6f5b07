"""The mandatory JobStore sub-protocols of the in-memory store."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import ClassVar, TypeVar, cast
from uuid import UUID

import attrs

from ratchet_api.errors import DuplicateJobError, StoreDataError, StoreError
from ratchet_api.model import TERMINAL_STATUSES, JobStatus, NodeTagFilter
from ratchet_api.store.entities import ChildSettlement, Completion, JobEntity, NodeEntity
from ratchet_api.store.fairness import fair_claim_order, plain_claim_key
from ratchet_api.store.protocols import JobStore
from ratchet_api.store.versions import STORE_SPI
from ratchet_tck.memory._state import MemoryState, check_job, check_tags, check_utc

C = TypeVar("C")


def _matches(
    job: JobEntity, targets: Sequence[str] | None, tag_filter: NodeTagFilter | None
) -> bool:
    if targets is not None and job.execution_target not in (None, *targets):
        return False
    if tag_filter is not None:
        tags = set(job.tags)
        if not tag_filter.required <= tags or tags & tag_filter.excluded:
            return False
    return True


class CoreMemoryStore:
    """Jobs, claims, transitions, bulk operations, nodes and tags, held in dictionaries."""

    fair_claims: ClassVar[bool] = False
    """Claims interleave fairness keys (set by ``FairClaimMixin``, the ``FairClaimStore``)."""

    ratchet_store_spi = STORE_SPI
    """The store SPI version this store implements (``ratchet_api.store.versions``)."""

    def __init__(self) -> None:
        self._s = MemoryState()

    # ------------------------------------------------------------------ JobStore
    def capability(self, kind: Callable[..., C]) -> C | None:
        return cast(C, self) if isinstance(self, cast(type, kind)) else None

    def joined(self, transaction: object) -> JobStore:
        raise StoreError(
            f"{type(self).__name__} keeps jobs in memory and cannot join the transaction "
            f"{transaction!r}; use a database store for transactional enqueue"
        )

    def close(self) -> None:
        return None

    def clear(self) -> None:
        """Forget everything (the TCK fixture's cleanup)."""
        self._s.clear()

    # ------------------------------------------------------------------ crud
    def insert_job(self, job: JobEntity) -> JobEntity:
        check_job(job)
        s = self._s
        with s.lock:
            if job.idempotency_key is not None:
                existing = self._by_key(job.idempotency_key)
                if existing is not None:
                    return existing
            if job.id in s.jobs or job.id in s.archive:
                raise DuplicateJobError(f"job {job.id} already exists")
            stored = attrs.evolve(job, tags=tuple(dict.fromkeys(job.tags)))
            s.jobs[job.id] = stored
            return stored

    def _by_key(self, key: str) -> JobEntity | None:
        return next((j for j in self._s.jobs.values() if j.idempotency_key == key), None)

    def find_by_id(self, job_id: UUID) -> JobEntity | None:
        with self._s.lock:
            return self._s.jobs.get(job_id)

    def find_by_idempotency_key(self, key: str) -> JobEntity | None:
        with self._s.lock:
            return self._by_key(key)

    def update_job(self, job: JobEntity) -> JobEntity:
        check_job(job)
        s = self._s
        with s.lock:
            s.job(job.id)
            return s.put(job, tags=tuple(dict.fromkeys(job.tags)))

    def delete_job(self, job_id: UUID) -> bool:
        s = self._s
        with s.lock:
            existed = s.jobs.pop(job_id, None) is not None
            if existed:
                s.drop_owned(job_id)
            return existed

    # ------------------------------------------------------------------ claim
    def claim_next_batch(
        self,
        node_id: str,
        limit: int,
        *,
        execution_targets: Sequence[str] | None = None,
        tag_filter: NodeTagFilter | None = None,
    ) -> list[JobEntity]:
        if limit < 1:
            raise StoreDataError("limit", f"must be at least 1, got {limit}")
        s = self._s
        with s.lock:
            now = s.now()
            candidates = [
                j
                for j in s.jobs.values()
                if j.status is JobStatus.PENDING
                and j.scheduled_at <= now
                and _matches(j, execution_targets, tag_filter)
            ]
            if self.fair_claims:
                # FairClaimStore: priority, rank within (priority, fairness_key) plus the
                # key's RUNNING jobs, due time, id
                running: dict[str, int] = {}
                for j in s.jobs.values():
                    if j.status is JobStatus.RUNNING and j.fairness_key is not None:
                        running[j.fairness_key] = running.get(j.fairness_key, 0) + 1
                due = fair_claim_order(fair_claim_order(candidates, running)[:limit])
            else:
                due = sorted(candidates, key=plain_claim_key)[:limit]
            return [
                s.put(
                    j,
                    status=JobStatus.RUNNING,
                    owner=node_id,
                    started_at=now,
                    heartbeat_at=now,
                    attempt=j.attempt + 1,
                    claim_seq=j.claim_seq + 1,
                    dispatched_at=None,
                )
                for j in due
            ]

    def mark_dispatched(self, claims: Mapping[UUID, int]) -> set[UUID]:
        s = self._s
        applied: set[UUID] = set()
        with s.lock:
            now = s.now()
            for job_id, claim_seq in claims.items():
                job = s.fenced(job_id, claim_seq)
                if job is not None:
                    if job.dispatched_at is None:
                        s.put(job, dispatched_at=now)
                    applied.add(job_id)
        return applied

    # ------------------------------------------------------------------ terminal
    def mark_succeeded(self, job_id: UUID, claim_seq: int, result: str | None) -> bool:
        s = self._s
        with s.lock:
            job = s.fenced(job_id, claim_seq)
            if job is None:
                return False
            s.put(job, status=JobStatus.SUCCEEDED, result=result, finished_at=s.now(), owner=None)
            s.count_batch_child(job, True)
            return True

    def mark_succeeded_many(self, completions: Sequence[Completion]) -> set[UUID]:
        with self._s.lock:
            return {
                c.job_id
                for c in completions
                if self.mark_succeeded(c.job_id, c.claim_seq, c.result)
            }

    def mark_failed_terminal(self, job_id: UUID, claim_seq: int, error: str) -> bool:
        s = self._s
        with s.lock:
            job = s.fenced(job_id, claim_seq)
            if job is None:
                return False
            s.put(job, status=JobStatus.FAILED, last_error=error, finished_at=s.now(), owner=None)
            s.count_batch_child(job, False)
            return True

    def cancel_job(self, job_id: UUID) -> bool:
        s = self._s
        with s.lock:
            job = s.jobs.get(job_id)
            if job is None or job.status in TERMINAL_STATUSES:
                return False
            s.put(job, status=JobStatus.CANCELLED, finished_at=s.now(), owner=None)
            s.count_batch_child(job, False)
            return True

    # ------------------------------------------------------------------ retry
    def schedule_retry(self, job_id: UUID, claim_seq: int, run_at: datetime, error: str) -> bool:
        check_utc(run_at, "run_at", job_id)
        s = self._s
        with s.lock:
            job = s.fenced(job_id, claim_seq)
            if job is None:
                return False
            s.put(job, status=JobStatus.PENDING, scheduled_at=run_at, last_error=error, owner=None)
            return True

    def retry_dead_letter(self, job_id: UUID, run_at: datetime | None = None) -> bool:
        check_utc(run_at, "run_at", job_id)
        s = self._s
        with s.lock:
            job = s.jobs.get(job_id)
            if job is None or job.status is not JobStatus.FAILED:
                return False
            s.put(
                job,
                status=JobStatus.PENDING,
                scheduled_at=run_at or s.now(),
                attempt=0,
                finished_at=None,
                owner=None,
            )
            return True

    # ------------------------------------------------------------------ pause / status
    def pause_job(self, job_id: UUID) -> bool:
        return self.compare_and_swap_status(job_id, JobStatus.PENDING, JobStatus.PAUSED)

    def resume_job(self, job_id: UUID) -> bool:
        return self.compare_and_swap_status(job_id, JobStatus.PAUSED, JobStatus.PENDING)

    def compare_and_swap_status(self, job_id: UUID, expected: JobStatus, new: JobStatus) -> bool:
        s = self._s
        with s.lock:
            job = s.jobs.get(job_id)
            if job is None or job.status is not expected:
                return False
            s.put(job, status=new)
            return True

    def release_claim(
        self,
        job_id: UUID,
        claim_seq: int,
        *,
        run_at: datetime | None = None,
        unless_dispatched: bool = False,
    ) -> bool:
        check_utc(run_at, "run_at", job_id)
        s = self._s
        with s.lock:
            job = s.fenced(job_id, claim_seq)
            if job is None or (unless_dispatched and job.dispatched_at is not None):
                return False
            s.put(
                job,
                status=JobStatus.PENDING,
                attempt=max(job.attempt - 1, 0),
                owner=None,
                scheduled_at=job.scheduled_at if run_at is None else run_at,
                started_at=None,
                heartbeat_at=None,
                dispatched_at=None,
            )
            return True

    def reset_running_jobs(self, node_id: str) -> int:
        s = self._s
        with s.lock:
            running = [
                j for j in s.jobs.values() if j.status is JobStatus.RUNNING and j.owner == node_id
            ]
            for j in running:
                s.put(j, status=JobStatus.PENDING, owner=None)
            return len(running)

    def find_children(self, parent_id: UUID) -> list[JobEntity]:
        with self._s.lock:
            children = [j for j in self._s.jobs.values() if j.parent_id == parent_id]
        return sorted(children, key=lambda j: (j.created_at, j.id.int))

    def release_waiting_children(self, parent_id: UUID, child_ids: Sequence[UUID]) -> int:
        s = self._s
        wanted = set(child_ids)
        with s.lock:
            now = s.now()
            released = [
                j
                for j in s.jobs.values()
                if j.id in wanted and j.parent_id == parent_id and j.status is JobStatus.WAITING
            ]
            for j in released:
                s.put(j, status=JobStatus.PENDING, scheduled_at=now)
            return len(released)

    def settle_children(self, parent_id: UUID, settlements: Sequence[ChildSettlement]) -> set[UUID]:
        s = self._s
        moved: set[UUID] = set()
        with s.lock:
            now = s.now()
            for item in settlements:
                job = s.jobs.get(item.child_id)
                if job is None or job.parent_id != parent_id or job.status is not JobStatus.WAITING:
                    continue
                if item.status is JobStatus.PENDING:
                    s.put(job, status=JobStatus.PENDING, scheduled_at=now)
                elif item.status is JobStatus.AWAITING_SIGNAL:
                    s.put(job, status=item.status, signal_deadline=item.signal_deadline)
                else:
                    s.put(
                        job, status=item.status, last_error=item.reason, finished_at=now, owner=None
                    )
                moved.add(item.child_id)
        return moved

    def find_orphaned_children(self, limit: int) -> list[JobEntity]:
        s = self._s
        with s.lock:
            orphans = []
            for j in s.jobs.values():
                if j.status is not JobStatus.WAITING or j.parent_id is None:
                    continue
                parent = s.jobs.get(j.parent_id)
                if parent is None or parent.status in TERMINAL_STATUSES:
                    orphans.append(j)
        return sorted(orphans, key=lambda j: (j.created_at, j.id.int))[:limit]

    # ------------------------------------------------------------------ bulk
    def bulk_insert(self, jobs: Sequence[JobEntity]) -> int:
        for job in jobs:
            check_job(job)
        s = self._s
        with s.lock:
            keys = {j.idempotency_key for j in s.jobs.values() if j.idempotency_key}
            fresh: list[JobEntity] = []
            ids: set[UUID] = set()
            for job in jobs:
                if job.idempotency_key is not None:
                    if job.idempotency_key in keys:
                        continue
                    keys.add(job.idempotency_key)
                if job.id in s.jobs or job.id in s.archive or job.id in ids:
                    raise DuplicateJobError(f"job {job.id} already exists")
                ids.add(job.id)
                fresh.append(attrs.evolve(job, tags=tuple(dict.fromkeys(job.tags))))
            for job in fresh:
                s.jobs[job.id] = job
            return len(fresh)

    def reset_orphan_jobs(self, node_ids: Sequence[str], heartbeat_before: datetime) -> int:
        check_utc(heartbeat_before, "heartbeat_before")
        s = self._s
        with s.lock:
            owners = {
                n
                for n in node_ids
                if n not in s.nodes or s.nodes[n].last_heartbeat < heartbeat_before
            }
            now = s.now()
            running = [
                j
                for j in s.jobs.values()
                if j.status is JobStatus.RUNNING
                and j.owner in owners
                and (j.heartbeat_at is None or j.heartbeat_at < heartbeat_before)
            ]
            for j in running:
                s.put(
                    j,
                    status=JobStatus.PENDING,
                    owner=None,
                    scheduled_at=now,
                    # a claim that never started gives its attempt back
                    attempt=j.attempt if j.dispatched_at is not None else max(j.attempt - 1, 0),
                    dispatched_at=None,
                )
            return len(running)

    def find_stale_running_jobs(self, heartbeat_before: datetime, limit: int) -> list[JobEntity]:
        check_utc(heartbeat_before, "heartbeat_before")
        with self._s.lock:
            stale = [
                j
                for j in self._s.jobs.values()
                if j.status is JobStatus.RUNNING
                and j.heartbeat_at is not None
                and j.heartbeat_at < heartbeat_before
            ]
        return sorted(stale, key=lambda j: (j.heartbeat_at, j.id.int))[:limit]

    def touch_running_jobs(self, node_id: str, job_ids: Sequence[UUID]) -> int:
        s = self._s
        with s.lock:
            now = s.now()
            mine = [
                s.jobs[i]
                for i in set(job_ids)
                if i in s.jobs
                and s.jobs[i].status is JobStatus.RUNNING
                and s.jobs[i].owner == node_id
            ]
            for j in mine:
                s.put(j, heartbeat_at=now)
            return len(mine)

    def delete_dead_letter_older_than(self, cutoff: datetime, limit: int) -> int:
        check_utc(cutoff, "cutoff")
        s = self._s
        with s.lock:
            old = sorted(
                (
                    j
                    for j in s.jobs.values()
                    if j.status is JobStatus.FAILED
                    and j.finished_at is not None
                    and j.finished_at < cutoff
                ),
                key=lambda j: (j.finished_at, j.id.int),
            )[:limit]
            for j in old:
                del s.jobs[j.id]
                s.drop_owned(j.id)
            return len(old)

    # ------------------------------------------------------------------ nodes
    def server_now(self) -> datetime:
        return self._s.now()

    def upsert_heartbeat(self, node: NodeEntity) -> None:
        s = self._s
        with s.lock:
            s.nodes[node.node_id] = attrs.evolve(node, last_heartbeat=s.now())

    def find_inactive_nodes(self, timeout: timedelta) -> list[NodeEntity]:
        s = self._s
        with s.lock:
            cutoff = s.now() - timeout
            return sorted(
                (n for n in s.nodes.values() if n.last_heartbeat < cutoff),
                key=lambda n: n.node_id,
            )

    def find_all_nodes(self) -> list[NodeEntity]:
        with self._s.lock:
            return sorted(self._s.nodes.values(), key=lambda n: n.node_id)

    def delete_inactive_nodes(self, timeout: timedelta) -> int:
        with self._s.lock:
            return self.delete_nodes_by_ids([n.node_id for n in self.find_inactive_nodes(timeout)])

    def delete_nodes_by_ids(self, node_ids: Sequence[str]) -> int:
        s = self._s
        with s.lock:
            return sum(s.nodes.pop(i, None) is not None for i in set(node_ids))

    # ------------------------------------------------------------------ tags
    def insert_tags(self, job_id: UUID, tags: Sequence[str]) -> None:
        check_tags(list(tags), job_id)
        s = self._s
        with s.lock:
            job = s.job(job_id)
            s.put(job, tags=tuple(dict.fromkeys((*job.tags, *tags))))

    def delete_tags_by_job_id(self, job_id: UUID) -> int:
        s = self._s
        with s.lock:
            job = s.jobs.get(job_id)
            if job is None:
                return 0
            s.put(job, tags=())
            return len(job.tags)

    def find_tags(self, job_id: UUID) -> list[str]:
        with self._s.lock:
            job = self._s.jobs.get(job_id)
            return sorted(job.tags) if job is not None else []
