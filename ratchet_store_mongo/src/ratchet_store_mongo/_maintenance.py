"""The mandatory maintenance sub-protocols: status changes and parent/child operations,
bulk operations and cleanup, tags."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from pymongo import ASCENDING, ReturnDocument
from pymongo.client_session import ClientSession
from pymongo.errors import BulkWriteError, DuplicateKeyError

from ratchet_api.errors import DuplicateJobError, JobNotFoundError, StoreDataError
from ratchet_api.model import JobStatus
from ratchet_api.store.entities import ChildSettlement, JobEntity
from ratchet_store_mongo._base import (
    TERMINAL,
    Doc,
    lit,
    require_non_negative,
    require_uuid,
    set_stage,
)
from ratchet_store_mongo._jobs import (
    CREATED_ORDER,
    IDEMPOTENCY_RACE_RETRIES,
    JobsMixin,
    check_tags,
    fenced,
)
from ratchet_store_mongo.documents import job_from_document, job_to_document, to_bson_datetime
from ratchet_store_mongo.errors import duplicate_key_index, translated


class JobMaintenanceMixin(JobsMixin):
    # ------------------------------------------------------------------ status / parent-child

    @translated("compare_and_swap_status")
    def compare_and_swap_status(self, job_id: UUID, expected: JobStatus, new: JobStatus) -> bool:
        try:
            new = JobStatus(new)
            expected = JobStatus(expected)
        except ValueError as exc:
            raise StoreDataError("status", str(exc), job_id=job_id) from exc
        values: Doc = {"status": new}
        if new is not JobStatus.RUNNING:
            values["owner"] = None
        return self._swap(job_id, expected, values, now=("finished_at",) if new.is_terminal else ())

    @translated("release_claim")
    def release_claim(
        self,
        job_id: UUID,
        claim_seq: int,
        *,
        run_at: datetime | None = None,
        unless_dispatched: bool = False,
    ) -> bool:
        values: Doc = {
            "status": JobStatus.PENDING,
            "owner": None,
            "started_at": None,
            "heartbeat_at": None,
            "dispatched_at": None,
        }
        if run_at is not None:
            values["scheduled_at"] = to_bson_datetime(run_at, "run_at")
        query = fenced(job_id, claim_seq)
        if unless_dispatched:
            query["dispatched_at"] = None  # null or missing
        result = self._jobs.update_one(
            query,
            set_stage(
                values,
                now=("updated_at",),
                attempt={"$max": [0, {"$subtract": ["$attempt", 1]}]},
            ),
            session=self._session,
        )
        return result.modified_count == 1

    def _reset_running(self, query: Doc, due_now: bool) -> int:
        result = self._jobs.update_many(
            {**query, "status": JobStatus.RUNNING.value},
            set_stage(
                {"status": JobStatus.PENDING, "owner": None, "heartbeat_at": None},
                now=("updated_at", "scheduled_at") if due_now else ("updated_at",),
            ),
            session=self._session,
        )
        return result.modified_count

    @translated("reset_running_jobs")
    def reset_running_jobs(self, node_id: str) -> int:
        return self._reset_running({"owner": node_id}, due_now=False)

    @translated("find_children")
    def find_children(self, parent_id: UUID) -> list[JobEntity]:
        cursor = self._jobs.find({"parent_id": parent_id}, session=self._session)
        return [job_from_document(d) for d in cursor.sort(CREATED_ORDER)]

    @translated("release_waiting_children")
    def release_waiting_children(self, parent_id: UUID, child_ids: Sequence[UUID]) -> int:
        if not child_ids:
            return 0
        result = self._jobs.update_many(
            {
                "_id": {"$in": list(child_ids)},
                "parent_id": parent_id,
                "status": JobStatus.WAITING.value,
            },
            set_stage({"status": JobStatus.PENDING}, now=("scheduled_at", "updated_at")),
            session=self._session,
        )
        return result.modified_count

    @translated("settle_children")
    def settle_children(self, parent_id: UUID, settlements: Sequence[ChildSettlement]) -> set[UUID]:
        if not settlements:
            return set()
        updates: list[tuple[UUID, list[Any]]] = []
        for item in settlements:
            values: dict[str, Any] = {"status": item.status}
            if item.status is JobStatus.PENDING:
                now: tuple[str, ...] = ("scheduled_at", "updated_at")
            elif item.status is JobStatus.AWAITING_SIGNAL:
                values["signal_deadline"] = item.signal_deadline
                now = ("updated_at",)
            else:
                values.update(last_error=item.reason, owner=None)
                now = ("finished_at", "updated_at")
            updates.append((item.child_id, set_stage(values, now=now)))

        def run(session: ClientSession) -> set[UUID]:
            moved: set[UUID] = set()
            for child_id, update in updates:
                result = self._jobs.update_one(
                    {"_id": child_id, "parent_id": parent_id, "status": JobStatus.WAITING.value},
                    update,
                    session=session,
                )
                if result.modified_count == 1:
                    moved.add(child_id)
            return moved

        return self._atomic(run)

    @translated("find_orphaned_children")
    def find_orphaned_children(self, limit: int) -> list[JobEntity]:
        require_non_negative(limit, "limit")
        orphans: list[JobEntity] = []
        if limit == 0:
            return orphans
        waiting = (
            self._jobs.find(
                {"status": JobStatus.WAITING.value, "parent_id": {"$ne": None}},
                session=self._session,
            )
            .sort(CREATED_ORDER)
            .batch_size(500)
        )
        page: list[Doc] = []

        def flush() -> None:
            parents = {d["parent_id"] for d in page}
            live = {
                d["_id"]
                for d in self._jobs.find(
                    {"_id": {"$in": list(parents)}, "status": {"$nin": TERMINAL}},
                    {"_id": 1},
                    session=self._session,
                )
            }
            orphans.extend(job_from_document(d) for d in page if d["parent_id"] not in live)
            page.clear()

        for doc in waiting:
            page.append(doc)
            if len(page) >= 500:
                flush()
                if len(orphans) >= limit:
                    break
        if page and len(orphans) < limit:
            flush()
        return orphans[:limit]

    # ------------------------------------------------------------------ bulk

    @translated("bulk_insert")
    def bulk_insert(self, jobs: Sequence[JobEntity]) -> int:
        if not jobs:
            return 0
        return self._insert_jobs(jobs)

    def _insert_jobs(
        self,
        jobs: Sequence[JobEntity],
        before: Callable[[ClientSession], None] | None = None,
        after: Callable[[ClientSession, int], None] | None = None,
    ) -> int:
        """``bulk_insert`` in one transaction, with ``before`` run first and ``after`` (given
        the number inserted) run last inside the same transaction (batch rows)."""
        docs = [job_to_document(job) for job in jobs]  # all validated before anything is written
        self._note_keyed(jobs)

        def run(session: ClientSession) -> int:
            if before is not None:
                before(session)
            keys = [d["idempotency_key"] for d in docs if d["idempotency_key"] is not None]
            taken: set[str] = set()
            if keys:
                taken = {
                    d["idempotency_key"]
                    for d in self._jobs.find(
                        {"idempotency_key": {"$in": keys}}, {"idempotency_key": 1}, session=session
                    )
                }
            fresh: list[Doc] = []
            for doc in docs:
                key = doc["idempotency_key"]
                if key is not None:
                    if key in taken:
                        continue
                    taken.add(key)
                fresh.append(doc)
            if fresh:
                self._jobs.insert_many(fresh, ordered=True, session=session)
            if after is not None:
                after(session, len(fresh))
            return len(fresh)

        for _ in range(IDEMPOTENCY_RACE_RETRIES):
            try:
                return self._atomic(run)
            except (DuplicateKeyError, BulkWriteError) as exc:
                index = _bulk_duplicate_index(exc)
                if index != "idempotency_key" or (
                    self._session is not None and self._session.in_transaction
                ):
                    # the caller's transaction is aborted by the error: it cannot be retried here
                    raise DuplicateJobError(
                        f"bulk insert refused, nothing inserted: duplicate {index or 'key'} "
                        f"({_bulk_error_message(exc)})"
                    ) from exc
                # a concurrent insert took an idempotency key after our check: run again
        raise DuplicateJobError("bulk insert: idempotency keys kept being taken concurrently")

    @translated("reset_orphan_jobs")
    def reset_orphan_jobs(self, node_ids: Sequence[str], heartbeat_before: datetime) -> int:
        cutoff = to_bson_datetime(heartbeat_before, "heartbeat_before")
        if not node_ids:
            return 0
        wanted = list(dict.fromkeys(node_ids))

        def run(session: ClientSession) -> int:
            # One transaction: the node check and the reset see one snapshot, and a job claimed
            # or touched meanwhile is excluded by the job's own heartbeat in the update filter
            # (or conflicts with the update, which with_transaction then retries).
            alive = {
                d["_id"]
                for d in self._col("nodes").find(
                    {"_id": {"$in": wanted}, "last_heartbeat": {"$gte": cutoff}},
                    {"_id": 1},
                    session=session,
                )
            }
            dead = [n for n in wanted if n not in alive]
            if not dead:
                return 0
            result = self._jobs.update_many(
                {
                    "owner": {"$in": dead},
                    "status": JobStatus.RUNNING.value,
                    "$or": [{"heartbeat_at": None}, {"heartbeat_at": {"$lt": cutoff}}],
                },
                set_stage(
                    {"status": JobStatus.PENDING, "owner": None, "heartbeat_at": None},
                    now=("updated_at", "scheduled_at"),
                    # a claim that never started gives its attempt back
                    attempt={
                        "$cond": [
                            {"$eq": [{"$ifNull": ["$dispatched_at", None]}, None]},
                            {"$max": [0, {"$subtract": ["$attempt", 1]}]},
                            "$attempt",
                        ]
                    },
                    dispatched_at=lit(None),
                ),
                session=session,
            )
            return result.modified_count

        return self._atomic(run)

    @translated("find_stale_running_jobs")
    def find_stale_running_jobs(self, heartbeat_before: datetime, limit: int) -> list[JobEntity]:
        require_non_negative(limit, "limit")
        if limit == 0:
            return []
        cursor = (
            self._jobs.find(
                {
                    "status": JobStatus.RUNNING.value,
                    "heartbeat_at": {"$lt": to_bson_datetime(heartbeat_before, "heartbeat_before")},
                },
                session=self._session,
            )
            .sort([("heartbeat_at", ASCENDING), ("_id", ASCENDING)])
            .limit(limit)
        )
        return [job_from_document(d) for d in cursor]

    @translated("touch_running_jobs")
    def touch_running_jobs(self, node_id: str, job_ids: Sequence[UUID]) -> int:
        if not job_ids:
            return 0
        result = self._jobs.update_many(
            {"_id": {"$in": list(job_ids)}, "owner": node_id, "status": JobStatus.RUNNING.value},
            set_stage({}, now=("heartbeat_at",)),
            session=self._session,
        )
        return result.matched_count

    @translated("delete_dead_letter_older_than")
    def delete_dead_letter_older_than(self, cutoff: datetime, limit: int) -> int:
        require_non_negative(limit, "limit")
        if limit == 0:
            return 0
        query = {
            "status": JobStatus.FAILED.value,
            "finished_at": {"$lt": to_bson_datetime(cutoff, "cutoff")},
        }

        def run(session: ClientSession) -> int:
            ids = [
                d["_id"]
                for d in self._jobs.find(query, {"_id": 1}, session=session)
                .sort([("finished_at", ASCENDING), ("_id", ASCENDING)])
                .limit(limit)
            ]
            if not ids:
                return 0
            deleted = self._jobs.delete_many({**query, "_id": {"$in": ids}}, session=session)
            self._col("logs").delete_many({"job_id": {"$in": ids}}, session=session)
            self._col("executions").delete_many({"job_id": {"$in": ids}}, session=session)
            return deleted.deleted_count

        return self._atomic(run)

    # ------------------------------------------------------------------ tags

    @translated("insert_tags")
    def insert_tags(self, job_id: UUID, tags: Sequence[str]) -> None:
        require_uuid(job_id, "job_id")
        clean = check_tags(job_id, tags)
        result = self._jobs.update_one(
            {"_id": job_id},
            [{"$set": {"tags": {"$setUnion": [{"$ifNull": ["$tags", []]}, lit(clean)]}}}],
            session=self._session,
        )
        if result.matched_count == 0:
            raise JobNotFoundError(job_id)

    @translated("delete_tags_by_job_id")
    def delete_tags_by_job_id(self, job_id: UUID) -> int:
        doc = self._jobs.find_one_and_update(
            {"_id": job_id},
            {"$set": {"tags": []}},
            {"tags": 1},
            return_document=ReturnDocument.BEFORE,
            session=self._session,
        )
        if doc is None:
            return 0
        tags = doc.get("tags")
        return len(tags) if isinstance(tags, list) else 0

    @translated("find_tags")
    def find_tags(self, job_id: UUID) -> list[str]:
        doc = self._jobs.find_one({"_id": job_id}, {"tags": 1}, session=self._session)
        if doc is None:
            return []
        tags = doc.get("tags")
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise StoreDataError(
                "tags", f"expected an array of strings, got {tags!r}", job_id=job_id
            )
        return sorted(tags)


def _bulk_duplicate_index(exc: DuplicateKeyError | BulkWriteError) -> str | None:
    if isinstance(exc, DuplicateKeyError):
        return duplicate_key_index(exc)
    for error in exc.details.get("writeErrors", []):
        if error.get("code") == 11000:
            pattern: Any = error.get("keyPattern")
            if isinstance(pattern, dict) and pattern:
                return str(next(iter(pattern)))
            message = str(error.get("errmsg", ""))
            return "idempotency_key" if "idempotency_key" in message else "_id"
    return None


def _bulk_error_message(exc: DuplicateKeyError | BulkWriteError) -> str:
    if isinstance(exc, BulkWriteError):
        errors = exc.details.get("writeErrors", [])
        return str(errors[0].get("errmsg")) if errors else str(exc)
    return str(exc)


__all__ = ["JobMaintenanceMixin"]
