"""Deliberately broken stores: each subclass of the in-memory store has exactly one defect.

The TCK's own tests run the matching contract against each and expect it to FAIL, which shows
that the contracts can fail. Fixture factories are module-level so ``--ratchet-tck-fixture``
can name them (``tests.tck.broken_stores:DoubleClaimFixture``).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import attrs

from ratchet_api.errors import StoreError
from ratchet_api.model import JobStatus, NodeTagFilter, StateWriteResult, VersionedState
from ratchet_api.store.entities import BatchEntity, JobEntity, LockEntity, NodeEntity
from ratchet_api.store.protocols import JobStore
from ratchet_api.store.queues import QueueStats, stats_of_jobs
from ratchet_tck.fixture import BaseStoreFixture
from ratchet_tck.memory import CoreMemoryStore, InMemoryJobStore


class DoubleClaimStore(InMemoryJobStore):
    """Selects due jobs, lets go of the lock, then marks them: two callers get one job."""

    def claim_next_batch(
        self,
        node_id: str,
        limit: int,
        *,
        execution_targets: Sequence[str] | None = None,
        tag_filter: NodeTagFilter | None = None,
    ) -> list[JobEntity]:
        s = self._s
        with s.lock:
            now = s.now()
            due = sorted(
                (
                    j
                    for j in s.jobs.values()
                    if j.status is JobStatus.PENDING and j.scheduled_at <= now
                ),
                key=lambda j: (-int(j.priority), j.scheduled_at, j.id.int),
            )[:limit]
        time.sleep(0.002)
        with s.lock:
            return [
                s.put(
                    j,
                    status=JobStatus.RUNNING,
                    owner=node_id,
                    started_at=now,
                    heartbeat_at=now,
                    attempt=j.attempt + 1,
                    claim_seq=j.claim_seq + 1,
                )
                for j in due
            ]


class FifoClaimStore(InMemoryJobStore):
    """Ignores priority: claims in due-time order only."""

    def claim_next_batch(
        self,
        node_id: str,
        limit: int,
        *,
        execution_targets: Sequence[str] | None = None,
        tag_filter: NodeTagFilter | None = None,
    ) -> list[JobEntity]:
        s = self._s
        with s.lock:
            now = s.now()
            due = sorted(
                (
                    j
                    for j in s.jobs.values()
                    if j.status is JobStatus.PENDING and j.scheduled_at <= now
                ),
                key=lambda j: (j.scheduled_at, j.id.int),
            )[:limit]
            return [
                s.put(
                    j,
                    status=JobStatus.RUNNING,
                    owner=node_id,
                    started_at=now,
                    heartbeat_at=now,
                    attempt=j.attempt + 1,
                    claim_seq=j.claim_seq + 1,
                )
                for j in due
            ]


class StaleCompletionStore(InMemoryJobStore):
    """Completes a RUNNING job whatever claim sequence the caller presents."""

    def mark_succeeded(self, job_id: UUID, claim_seq: int, result: str | None) -> bool:
        job = self._s.jobs.get(job_id)
        if job is None or job.status is not JobStatus.RUNNING:
            return False
        return super().mark_succeeded(job_id, job.claim_seq, result)


class CancelTerminalStore(InMemoryJobStore):
    """Cancels any existing job, terminal or not."""

    def cancel_job(self, job_id: UUID) -> bool:
        s = self._s
        with s.lock:
            job = s.jobs.get(job_id)
            if job is None:
                return False
            s.put(job, status=JobStatus.CANCELLED, finished_at=s.now(), owner=None)
            return True


class UnlockIgnoresOwnerStore(InMemoryJobStore):
    def unlock(self, name: str, owner: str) -> bool:
        with self._s.lock:
            return self._s.locks.pop(name, None) is not None


class RenewIgnoresOwnerStore(InMemoryJobStore):
    def renew_lock(self, name: str, owner: str, ttl: timedelta) -> bool:
        s = self._s
        with s.lock:
            current = s.locks.get(name)
            if current is None or current.expires_at <= s.now():
                return False
            s.locks[name] = attrs.evolve(current, expires_at=s.now() + ttl)
            return True


class ExpiredLeaseStuckStore(InMemoryJobStore):
    """An expired lease is never reclaimable by another owner."""

    def try_lock(self, name: str, owner: str, ttl: timedelta) -> bool:
        s = self._s
        with s.lock:
            current = s.locks.get(name)
            if current is not None and current.owner != owner:
                return False
            now = s.now()
            s.locks[name] = LockEntity(
                name=name, owner=owner, acquired_at=now, expires_at=now + ttl
            )
            return True


class RacyLockStore(InMemoryJobStore):
    """Checks, then acts, without holding the lock in between."""

    def try_lock(self, name: str, owner: str, ttl: timedelta) -> bool:
        s = self._s
        current = s.locks.get(name)
        if current is not None and current.owner != owner and current.expires_at > s.now():
            return False
        time.sleep(0.002)
        now = s.now()
        s.locks[name] = LockEntity(name=name, owner=owner, acquired_at=now, expires_at=now + ttl)
        return True


class StateIgnoresVersionStore(InMemoryJobStore):
    def update_state(
        self,
        job_id: UUID,
        namespace: str,
        state: str,
        expected_version: int,
        expected_claim_seq: int | None = None,
    ) -> StateWriteResult:
        current = self._s.states.get(job_id, {}).get(namespace)
        version = current.version if current is not None else expected_version
        return super().update_state(job_id, namespace, state, version, expected_claim_seq)


class StateIgnoresFenceStore(InMemoryJobStore):
    def update_state(
        self,
        job_id: UUID,
        namespace: str,
        state: str,
        expected_version: int,
        expected_claim_seq: int | None = None,
    ) -> StateWriteResult:
        return super().update_state(job_id, namespace, state, expected_version, None)


class PropertyOverwriteStore(InMemoryJobStore):
    def put_property(self, job_id: UUID, key: str, value: str) -> bool:
        with self._s.lock:
            self._s.job(job_id)
            self._s.properties.setdefault(job_id, {})[key] = value
            return True


class LostIncrementStore(InMemoryJobStore):
    """Read-modify-write without holding the lock: concurrent increments overwrite each other."""

    def increment_finished(self, batch_id: UUID, succeeded: bool) -> BatchEntity:
        batch = self._s.batches[batch_id]
        time.sleep(0.0005)
        if succeeded:
            batch = attrs.evolve(batch, succeeded=batch.succeeded + 1)
        else:
            batch = attrs.evolve(batch, failed=batch.failed + 1)
        self._s.batches[batch_id] = batch
        return batch


class ClientClockHeartbeatStore(InMemoryJobStore):
    """Stores the caller's ``last_heartbeat`` instead of the store's clock."""

    def upsert_heartbeat(self, node: NodeEntity) -> None:
        with self._s.lock:
            self._s.nodes[node.node_id] = node


class RacyOrphanResetStore(InMemoryJobStore):
    """Keeps the dead-node recovery race: resets every RUNNING job of the listed nodes, whatever
    heartbeat or claim happened after ``heartbeat_before``."""

    def reset_orphan_jobs(self, node_ids: Sequence[str], heartbeat_before: datetime) -> int:
        s = self._s
        with s.lock:
            running = [
                j
                for j in s.jobs.values()
                if j.status is JobStatus.RUNNING and j.owner in set(node_ids)
            ]
            for j in running:
                s.put(j, status=JobStatus.PENDING, owner=None, scheduled_at=s.now())
            return len(running)


class LongTagStore(InMemoryJobStore):
    """Accepts tags of any length (silently truncating them)."""

    def insert_tags(self, job_id: UUID, tags: Sequence[str]) -> None:
        super().insert_tags(job_id, [t[:128] for t in tags])


class ArchiveCopiesStore(InMemoryJobStore):
    """Archives a copy but leaves the hot row: the job is in both places."""

    def archive_job(self, job_id: UUID) -> bool:
        with self._s.lock:
            job = self._s.jobs.get(job_id)
            if not super().archive_job(job_id):
                return False
            assert job is not None
            self._s.jobs[job_id] = job
            return True


class ArchiveDropsStateStore(InMemoryJobStore):
    """Archives the job but forgets its versioned state."""

    def archive_job(self, job_id: UUID) -> bool:
        with self._s.lock:
            self._s.states.pop(job_id, None)
            return super().archive_job(job_id)


class DeleteLeavesPropertiesStore(InMemoryJobStore):
    def delete_job(self, job_id: UUID) -> bool:
        with self._s.lock:
            props = self._s.properties.get(job_id)
            states: dict[str, VersionedState] | None = self._s.states.get(job_id)
            existed = super().delete_job(job_id)
            if props is not None:
                self._s.properties[job_id] = props
            if states is not None:
                self._s.states[job_id] = states
            return existed


class DoubleSignalStore(InMemoryJobStore):
    """Reads the status, then writes, outside the lock: two deliveries can both win."""

    def deliver_signal_by_id(self, job_id: UUID, payload: str | None) -> bool:
        s = self._s
        job = s.jobs.get(job_id)
        if job is None or job.status is not JobStatus.AWAITING_SIGNAL:
            return False
        time.sleep(0.002)
        with s.lock:
            s.put(job, status=JobStatus.PENDING, scheduled_at=s.now(), signal_payload=payload)
        return True


class PermitOverLimitStore(InMemoryJobStore):
    """Counts expired permits as live, so a crashed holder blocks the key forever."""

    def try_acquire_permit(
        self, resource_key: str, holder: str, limit: int, ttl: timedelta
    ) -> bool:
        s = self._s
        with s.lock:
            held = s.permits.setdefault(resource_key, {})
            if holder not in held and len(held) >= limit:
                return False
            held[holder] = s.now() + ttl
            return True


class FutureCountedDueStore(InMemoryJobStore):
    """Counts every PENDING job as due, the ones scheduled for later too (an autoscaler then
    starts workers for work that does not exist yet)."""

    def queue_stats(self, finished_since: datetime | None = None) -> QueueStats:
        with self._s.lock:
            jobs = [
                attrs.evolve(j, scheduled_at=min(j.scheduled_at, self._s.now()))
                for j in self._s.jobs.values()
            ]
            return stats_of_jobs(jobs, self._s.now(), finished_since)


class MemoryTransaction:
    """A caller's transaction over an in-memory store: the writes made through a view joined
    to it are undone, newest first, by ``rollback``."""

    def __init__(self) -> None:
        self.undo: list[Callable[[], None]] = []

    @property
    def handle(self) -> object:
        return self

    def commit(self) -> None:
        self.undo.clear()

    def rollback(self) -> None:
        while self.undo:
            self.undo.pop()()


class TransactionalMemoryStore(InMemoryJobStore):
    """Not broken: ``joined`` views put ``insert_job`` (REQUIRED) in the caller's transaction
    and leave the liveness writes (REQUIRES_NEW) out of it."""

    _tx: MemoryTransaction | None = None

    def joined(self, transaction: object) -> JobStore:
        if not isinstance(transaction, MemoryTransaction):
            raise StoreError(f"cannot join {transaction!r}")
        view = copy.copy(self)
        view._tx = transaction
        return view

    def insert_job(self, job: JobEntity) -> JobEntity:
        stored = super().insert_job(job)
        if self._tx is not None:

            def undo() -> None:
                self.delete_job(job.id)

            self._tx.undo.append(undo)
        return stored

    def _joining(self, table: dict[str, Any]) -> None:
        """Record ``table`` as it is now, for the caller's rollback (the defect below)."""
        if self._tx is not None:
            before = dict(table)

            def restore() -> None:
                with self._s.lock:
                    table.clear()
                    table.update(before)

            self._tx.undo.append(restore)


class JoinedLivenessStore(TransactionalMemoryStore):
    """Heartbeats, node deletions and lock writes through a joined view join the caller's
    transaction: its rollback undoes them."""

    def upsert_heartbeat(self, node: NodeEntity) -> None:
        self._joining(self._s.nodes)
        super().upsert_heartbeat(node)

    def delete_nodes_by_ids(self, node_ids: Sequence[str]) -> int:
        self._joining(self._s.nodes)
        return super().delete_nodes_by_ids(node_ids)

    def try_lock(self, name: str, owner: str, ttl: timedelta) -> bool:
        self._joining(self._s.locks)
        return super().try_lock(name, owner, ttl)

    def unlock(self, name: str, owner: str) -> bool:
        self._joining(self._s.locks)
        return super().unlock(name, owner)

    def renew_lock(self, name: str, owner: str, ttl: timedelta) -> bool:
        self._joining(self._s.locks)
        return super().renew_lock(name, owner, ttl)


def _fixture(store_cls: type[CoreMemoryStore]) -> type[BaseStoreFixture]:
    class Fixture(BaseStoreFixture):
        def __init__(self) -> None:
            self._store = store_cls()

        def store(self) -> CoreMemoryStore:  # type: ignore[override]
            return self._store

        def cleanup_store(self) -> None:
            self._store.clear()

        def begin_transaction(self) -> MemoryTransaction | None:
            if isinstance(self._store, TransactionalMemoryStore):
                return MemoryTransaction()
            return None

    Fixture.__name__ = Fixture.__qualname__ = f"{store_cls.__name__}Fixture"
    return Fixture


DoubleClaimFixture = _fixture(DoubleClaimStore)
FifoClaimFixture = _fixture(FifoClaimStore)
StaleCompletionFixture = _fixture(StaleCompletionStore)
CancelTerminalFixture = _fixture(CancelTerminalStore)
UnlockIgnoresOwnerFixture = _fixture(UnlockIgnoresOwnerStore)
RenewIgnoresOwnerFixture = _fixture(RenewIgnoresOwnerStore)
ExpiredLeaseStuckFixture = _fixture(ExpiredLeaseStuckStore)
RacyLockFixture = _fixture(RacyLockStore)
StateIgnoresVersionFixture = _fixture(StateIgnoresVersionStore)
StateIgnoresFenceFixture = _fixture(StateIgnoresFenceStore)
PropertyOverwriteFixture = _fixture(PropertyOverwriteStore)
LostIncrementFixture = _fixture(LostIncrementStore)
ClientClockHeartbeatFixture = _fixture(ClientClockHeartbeatStore)
LongTagFixture = _fixture(LongTagStore)
RacyOrphanResetFixture = _fixture(RacyOrphanResetStore)
ArchiveCopiesFixture = _fixture(ArchiveCopiesStore)
ArchiveDropsStateFixture = _fixture(ArchiveDropsStateStore)
DeleteLeavesPropertiesFixture = _fixture(DeleteLeavesPropertiesStore)
DoubleSignalFixture = _fixture(DoubleSignalStore)
PermitOverLimitFixture = _fixture(PermitOverLimitStore)
FutureCountedDueFixture = _fixture(FutureCountedDueStore)
JoinedLivenessFixture = _fixture(JoinedLivenessStore)
TransactionalMemoryFixture = _fixture(TransactionalMemoryStore)
"""Not broken: the memory store with callers' transactions (REQUIRES_NEW kept)."""
CoreOnlyFixture = _fixture(CoreMemoryStore)
"""Not broken: a store with no optional capability (its capability contracts are N/A)."""
