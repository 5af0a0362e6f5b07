"""The worker's batched hot writes (``WorkerBatchStore``): the claim that marks the jobs
starting at once (their claim updates stamp ``dispatched_at``), and many fenced failure writes
in one ``bulk_write``."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from pymongo import UpdateOne

from ratchet_api.errors import StoreDataError
from ratchet_api.ids import uuid7
from ratchet_api.model import JobStatus, NodeTagFilter
from ratchet_api.store.entities import FailedClaim, FailureWrite, JobEntity
from ratchet_store_mongo._base import Doc, set_stage
from ratchet_store_mongo._jobs import JobsMixin, fenced
from ratchet_store_mongo.documents import to_bson_datetime
from ratchet_store_mongo.errors import translated


def _failure_update(f: FailedClaim, token: UUID) -> list[Doc]:
    if f.kind is FailureWrite.RETRY:
        assert f.run_at is not None  # FailedClaim checks it
        return set_stage(
            {
                "status": JobStatus.PENDING,
                "scheduled_at": to_bson_datetime(f.run_at, "run_at"),
                "last_error": f.error,
                "owner": None,
                "heartbeat_at": None,
                "completion_token": token,
            },
            now=("updated_at",),
        )
    return set_stage(
        {
            "status": JobStatus.FAILED,
            "last_error": f.error,
            "owner": None,
            "completion_token": token,
        },
        now=("finished_at", "updated_at"),
    )


class MongoWorkerBatchMixin(JobsMixin):
    @translated("claim_next_batch")
    def claim_and_start(
        self,
        node_id: str,
        limit: int,
        *,
        start: int,
        execution_targets: Sequence[str] | None = None,
        tag_filter: NodeTagFilter | None = None,
    ) -> list[JobEntity]:
        if not isinstance(start, int) or start < 0:
            raise StoreDataError("start", f"must be at least 0, got {start!r}")
        return self._claim_jobs(node_id, limit, execution_targets, tag_filter, start=start)

    @translated("write_failures")
    def write_failures(self, failures: Sequence[FailedClaim]) -> set[UUID]:
        if not failures:
            return set()
        last = {f.job_id: f for f in failures}  # the last write of a job wins
        # bulk_write reports counts, not which updates applied: each applied update stamps this
        # call's token, and one read by id collects the stamped jobs (as mark_succeeded_many)
        token = uuid7()
        ops = [
            UpdateOne(fenced(f.job_id, f.claim_seq), _failure_update(f, token))
            for f in last.values()
        ]
        self._jobs.bulk_write(ops, ordered=False, session=self._session)
        applied = list(
            self._jobs.find(
                {"_id": {"$in": list(last)}, "completion_token": token},
                {"_id": 1, "batch_id": 1},
                session=self._session,
            )
        )
        per_batch: dict[UUID, int] = {}
        for doc in applied:
            dead = last[doc["_id"]].kind is FailureWrite.DEAD_LETTER
            if dead and doc.get("batch_id") is not None:
                per_batch[doc["batch_id"]] = per_batch.get(doc["batch_id"], 0) + 1
        for batch_id, count in sorted(per_batch.items()):
            self._col("batches").update_one(
                {"_id": batch_id}, {"$inc": {"failed": count}}, session=self._session
            )
        return {doc["_id"] for doc in applied}


__all__ = ["MongoWorkerBatchMixin"]
