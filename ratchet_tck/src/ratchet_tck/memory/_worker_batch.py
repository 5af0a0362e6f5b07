"""``WorkerBatchStore`` of the in-memory store: the claim that marks the jobs starting at once,
and many fenced failure writes under one lock."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from ratchet_api.errors import StoreDataError
from ratchet_api.model import NodeTagFilter
from ratchet_api.store.entities import FailedClaim, FailureWrite, JobEntity
from ratchet_tck.memory._core import CoreMemoryStore


class WorkerBatchMixin(CoreMemoryStore):
    def claim_and_start(
        self,
        node_id: str,
        limit: int,
        *,
        start: int,
        execution_targets: Sequence[str] | None = None,
        tag_filter: NodeTagFilter | None = None,
    ) -> list[JobEntity]:
        if start < 0:
            raise StoreDataError("start", f"must be at least 0, got {start}")
        s = self._s
        with s.lock:  # re-entrant: the claim and its marks are one unit
            claimed = self.claim_next_batch(
                node_id, limit, execution_targets=execution_targets, tag_filter=tag_filter
            )
            return [
                s.put(job, dispatched_at=job.started_at) if index < start else job
                for index, job in enumerate(claimed)
            ]

    def write_failures(self, failures: Sequence[FailedClaim]) -> set[UUID]:
        last = {f.job_id: f for f in failures}
        applied: set[UUID] = set()
        with self._s.lock:
            for f in last.values():
                if f.kind is FailureWrite.RETRY:
                    assert f.run_at is not None  # FailedClaim checks it
                    done = self.schedule_retry(f.job_id, f.claim_seq, f.run_at, f.error)
                else:
                    done = self.mark_failed_terminal(f.job_id, f.claim_seq, f.error)
                if done:
                    applied.add(f.job_id)
        return applied


__all__ = ["WorkerBatchMixin"]
