"""Optional capabilities around the engine's features: recurring definitions, batches,
workflow conditions and signals."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

from pymongo import ASCENDING, DESCENDING, ReturnDocument
from pymongo.client_session import ClientSession
from pymongo.errors import DuplicateKeyError

from ratchet_api.errors import InvalidStateTransitionError, StoreDataError, StoreError
from ratchet_api.model import JobStatus
from ratchet_api.store.entities import (
    BatchEntity,
    BatchStatus,
    JobEntity,
    RecurringAdvance,
    RecurringJobEntity,
    WorkflowConditionEntity,
)
from ratchet_store_mongo._base import MongoBase, require_key, require_non_negative, set_stage
from ratchet_store_mongo.documents import (
    from_document,
    job_from_document,
    to_bson_datetime,
    to_document,
)
from ratchet_store_mongo.errors import translated


class FeaturesMixin(MongoBase):
    if TYPE_CHECKING:

        def _insert_jobs(
            self,
            jobs: Sequence[JobEntity],
            before: Callable[[ClientSession], None] | None = None,
            after: Callable[[ClientSession, int], None] | None = None,
        ) -> int: ...

    # ------------------------------------------------------------------ recurring

    @translated("save_recurring")
    def save_recurring(self, recurring: RecurringJobEntity) -> RecurringJobEntity:
        doc = to_document(recurring)
        self._col("recurring").replace_one(
            {"_id": doc["_id"]}, doc, upsert=True, session=self._session
        )
        return from_document(RecurringJobEntity, doc)

    @translated("find_recurring")
    def find_recurring(self, name: str) -> RecurringJobEntity | None:
        doc = self._col("recurring").find_one({"_id": name}, session=self._session)
        return None if doc is None else from_document(RecurringJobEntity, doc)

    @translated("list_recurring")
    def list_recurring(self) -> list[RecurringJobEntity]:
        cursor = self._col("recurring").find({}, session=self._session).sort("_id", ASCENDING)
        return [from_document(RecurringJobEntity, d) for d in cursor]

    @translated("find_due_recurring")
    def find_due_recurring(self, limit: int) -> list[RecurringJobEntity]:
        require_non_negative(limit, "limit")
        if limit == 0:
            return []
        cursor = (
            self._col("recurring")
            .find({"enabled": True, "next_fire_at": {"$lte": self._now()}}, session=self._session)
            .sort([("next_fire_at", ASCENDING), ("_id", ASCENDING)])
            .limit(limit)
        )
        return [from_document(RecurringJobEntity, d) for d in cursor]

    @translated("advance_next_fire")
    def advance_next_fire(
        self, name: str, expected_fire_at: datetime, next_fire_at: datetime
    ) -> bool:
        expected = to_bson_datetime(expected_fire_at, "expected_fire_at")
        result = self._col("recurring").update_one(
            {"_id": name, "next_fire_at": expected},
            {
                "$set": {
                    "next_fire_at": to_bson_datetime(next_fire_at, "next_fire_at"),
                    "last_fired_at": expected,
                }
            },
            session=self._session,
        )
        return result.modified_count == 1

    @translated("advance_next_fire_many")
    def advance_next_fire_many(self, advances: Sequence[RecurringAdvance]) -> set[str]:
        # Each compare-and-set is one atomic update_one; a bulk write carries them in one round
        # trip but reports only totals, so they are sent one by one (in name order).
        won: set[str] = set()
        col = self._col("recurring")
        for a in sorted(advances, key=lambda x: x.name):
            expected = to_bson_datetime(a.expected_fire_at, "expected_fire_at")
            result = col.update_one(
                {"_id": a.name, "next_fire_at": expected},
                {
                    "$set": {
                        "next_fire_at": to_bson_datetime(a.next_fire_at, "next_fire_at"),
                        "last_fired_at": expected,
                    }
                },
                session=self._session,
            )
            if result.modified_count == 1:
                won.add(a.name)
        return won

    @translated("delete_recurring")
    def delete_recurring(self, name: str) -> bool:
        result = self._col("recurring").delete_one({"_id": name}, session=self._session)
        return result.deleted_count == 1

    # ------------------------------------------------------------------ batches

    @translated("save_batch")
    def save_batch(self, batch: BatchEntity) -> BatchEntity:
        doc = to_document(batch)
        try:
            self._col("batches").insert_one(doc, session=self._session)
        except DuplicateKeyError as exc:
            raise StoreError(f"batch {batch.id} already exists") from exc
        return from_document(BatchEntity, doc)

    @translated("insert_batch")
    def insert_batch(self, batch: BatchEntity, jobs: Sequence[JobEntity]) -> int:
        doc = to_document(batch)

        def save(session: ClientSession) -> None:
            try:
                self._col("batches").insert_one(doc, session=session)
            except DuplicateKeyError as exc:
                raise StoreError(f"batch {batch.id} already exists") from exc

        return self._insert_jobs(jobs, before=save)

    @translated("add_batch_jobs")
    def add_batch_jobs(self, batch_id: UUID, jobs: Sequence[JobEntity]) -> int:
        batches = self._col("batches")

        def lock(session: ClientSession) -> None:
            # a no-op write on the batch document: concurrent chunks of one batch conflict
            # (and are retried by the transaction) instead of interleaving
            found = batches.find_one_and_update(
                {"_id": batch_id, "status": BatchStatus.OPEN.value},
                {"$inc": {"total": 0}},
                session=session,
            )
            if found is None:
                batch = self._batch_or_raise(batch_id, "add children")
                raise InvalidStateTransitionError(
                    f"cannot add children to batch {batch_id}: it is {batch.status.value}, not OPEN"
                )

        def count(session: ClientSession, inserted: int) -> None:
            if inserted:
                batches.update_one(
                    {"_id": batch_id}, {"$inc": {"total": inserted}}, session=session
                )

        return self._insert_jobs(jobs, before=lock, after=count)

    @translated("find_batches")
    def find_batches(
        self, *, statuses: frozenset[BatchStatus] | None = None, limit: int = 100, offset: int = 0
    ) -> list[BatchEntity]:
        query: dict[str, object] = {}
        if statuses is not None:
            query["status"] = {"$in": sorted(BatchStatus(x).value for x in statuses)}
        cursor = (
            self._col("batches")
            .find(query, session=self._session)
            .sort([("created_at", DESCENDING), ("_id", DESCENDING)])
            .skip(offset)
            .limit(limit)
        )
        return [from_document(BatchEntity, d) for d in cursor]

    @translated("recount_batch")
    def recount_batch(self, batch_id: UUID) -> BatchEntity | None:
        batches = self._col("batches")
        for _ in range(20):
            doc = batches.find_one({"_id": batch_id}, session=self._session)
            if doc is None:
                return None
            counts = {
                row["_id"]: row["n"]
                for row in self._jobs.aggregate(
                    [
                        {"$match": {"batch_id": batch_id}},
                        {"$group": {"_id": "$status", "n": {"$sum": 1}}},
                    ],
                    session=self._session,
                )
            }
            succeeded = max(doc["succeeded"], counts.get(JobStatus.SUCCEEDED.value, 0))
            failed = max(
                doc["failed"],
                counts.get(JobStatus.FAILED.value, 0) + counts.get(JobStatus.CANCELLED.value, 0),
            )
            # written only if no count moved meanwhile (a concurrent increment retries this)
            written = batches.update_one(
                {"_id": batch_id, "succeeded": doc["succeeded"], "failed": doc["failed"]},
                {"$set": {"succeeded": succeeded, "failed": failed}},
                session=self._session,
            )
            if written.matched_count == 1:
                return self.find_batch(batch_id)
        return self.find_batch(batch_id)

    @translated("record_batch_error")
    def record_batch_error(self, batch_id: UUID, error: str) -> bool:
        result = self._col("batches").update_one(
            {"_id": batch_id}, {"$set": {"last_error": error}}, session=self._session
        )
        return result.matched_count == 1

    @translated("find_batch")
    def find_batch(self, batch_id: UUID) -> BatchEntity | None:
        doc = self._col("batches").find_one({"_id": batch_id}, session=self._session)
        return None if doc is None else from_document(BatchEntity, doc)

    def _batch_or_raise(self, batch_id: UUID, doing: str) -> BatchEntity:
        batch = self.find_batch(batch_id)
        if batch is None:
            raise InvalidStateTransitionError(f"cannot {doing}: batch {batch_id} does not exist")
        return batch

    @translated("add_to_total")
    def add_to_total(self, batch_id: UUID, count: int) -> BatchEntity:
        require_non_negative(count, "count")
        doc = self._col("batches").find_one_and_update(
            {"_id": batch_id, "status": BatchStatus.OPEN.value},
            {"$inc": {"total": count}},
            return_document=ReturnDocument.AFTER,
            session=self._session,
        )
        if doc is None:
            batch = self._batch_or_raise(batch_id, "add children")
            raise InvalidStateTransitionError(
                f"cannot add children to batch {batch_id}: it is {batch.status.value}, not OPEN"
            )
        return from_document(BatchEntity, doc)

    @translated("seal_batch")
    def seal_batch(self, batch_id: UUID) -> bool:
        result = self._col("batches").update_one(
            {"_id": batch_id, "status": BatchStatus.OPEN.value},
            {"$set": {"status": BatchStatus.SEALED.value}},
            session=self._session,
        )
        return result.modified_count == 1

    @translated("increment_finished")
    def increment_finished(self, batch_id: UUID, succeeded: bool) -> BatchEntity:
        doc = self._col("batches").find_one_and_update(
            {"_id": batch_id},
            {"$inc": {"succeeded" if succeeded else "failed": 1}},
            return_document=ReturnDocument.AFTER,
            session=self._session,
        )
        if doc is None:
            self._batch_or_raise(batch_id, "count a finished child")
        return from_document(BatchEntity, doc or {})

    @translated("mark_batch_complete_if_ready")
    def mark_batch_complete_if_ready(self, batch_id: UUID) -> bool:
        result = self._col("batches").update_one(
            {
                "_id": batch_id,
                "status": BatchStatus.SEALED.value,
                "$expr": {"$gte": [{"$add": ["$succeeded", "$failed"]}, "$total"]},
            },
            set_stage({"status": BatchStatus.COMPLETED}, now=("completed_at",)),
            session=self._session,
        )
        return result.modified_count == 1

    # ------------------------------------------------------------------ workflow conditions

    @translated("save_conditions")
    def save_conditions(self, conditions: Sequence[WorkflowConditionEntity]) -> None:
        docs = [to_document(c) for c in conditions]
        if not docs:
            return
        try:
            if len(docs) == 1:
                self._col("conditions").insert_one(docs[0], session=self._session)
            else:
                self._atomic(lambda s: self._col("conditions").insert_many(docs, session=s))
        except DuplicateKeyError as exc:
            raise StoreError(f"workflow condition already exists: {exc}") from exc

    @translated("find_conditions_by_parent")
    def find_conditions_by_parent(self, parent_job_id: UUID) -> list[WorkflowConditionEntity]:
        cursor = (
            self._col("conditions")
            .find({"parent_job_id": parent_job_id}, session=self._session)
            .sort([("position", ASCENDING), ("_id", ASCENDING)])
        )
        return [from_document(WorkflowConditionEntity, d) for d in cursor]

    @translated("delete_conditions_by_parent")
    def delete_conditions_by_parent(self, parent_job_id: UUID) -> int:
        return (
            self._col("conditions")
            .delete_many({"parent_job_id": parent_job_id}, session=self._session)
            .deleted_count
        )

    # ------------------------------------------------------------------ signals

    def _deliver(self, query: dict[str, object], payload: str | None, many: bool) -> int:
        if payload is not None and not isinstance(payload, str):
            raise StoreDataError(
                "payload", f"must be a string or None, got {type(payload).__name__}"
            )
        update = set_stage(
            {"status": JobStatus.PENDING, "signal_payload": payload},
            now=("scheduled_at", "updated_at"),
        )
        query = {**query, "status": JobStatus.AWAITING_SIGNAL.value}
        if many:
            return self._jobs.update_many(query, update, session=self._session).modified_count
        return self._jobs.update_one(query, update, session=self._session).modified_count

    @translated("deliver_signal_by_id")
    def deliver_signal_by_id(self, job_id: UUID, payload: str | None) -> bool:
        return self._deliver({"_id": job_id}, payload, many=False) == 1

    @translated("deliver_signal_by_key")
    def deliver_signal_by_key(self, signal_key: str, payload: str | None) -> int:
        require_key(signal_key, "signal_key")
        return self._deliver({"signal_key": signal_key}, payload, many=True)

    @translated("find_timed_out_signal_jobs")
    def find_timed_out_signal_jobs(self, limit: int) -> list[JobEntity]:
        require_non_negative(limit, "limit")
        if limit == 0:
            return []
        cursor = (
            self._jobs.find(
                {
                    "status": JobStatus.AWAITING_SIGNAL.value,
                    "signal_deadline": {"$type": "date", "$lte": self._now()},
                },
                session=self._session,
            )
            .sort([("signal_deadline", ASCENDING), ("_id", ASCENDING)])
            .limit(limit)
        )
        return [job_from_document(d) for d in cursor]

    @translated("expire_signal")
    def expire_signal(self, job_id: UUID, error: str, status: JobStatus = JobStatus.FAILED) -> bool:
        if status not in (JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.PENDING):
            raise StoreDataError("status", f"must be FAILED, CANCELLED or PENDING, got {status!r}")
        query = {"_id": job_id, "status": JobStatus.AWAITING_SIGNAL.value}
        values = {"status": status, "last_error": error, "owner": None}
        if status is JobStatus.PENDING:
            result = self._jobs.update_one(
                query,
                set_stage(values, now=("scheduled_at", "updated_at")),
                session=self._session,
            )
            return result.modified_count == 1
        # a terminal expiry counts the job in its batch in the same unit of work
        return self._finish_one(query, set_stage(values, now=("finished_at", "updated_at")), False)

    @translated("find_jobs_by_signal_key")
    def find_jobs_by_signal_key(self, signal_key: str, limit: int) -> list[JobEntity]:
        require_non_negative(limit, "limit")
        if limit == 0:
            return []
        cursor = (
            self._jobs.find({"signal_key": signal_key}, session=self._session)
            .sort([("created_at", ASCENDING), ("_id", ASCENDING)])
            .limit(limit)
        )
        return [job_from_document(d) for d in cursor]


__all__ = ["FeaturesMixin"]
