"""The mandatory job sub-protocols: crud, claim, terminal, retry, pause, status, bulk, tags."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import attrs
from pymongo import ASCENDING, DESCENDING, ReturnDocument, UpdateOne
from pymongo.client_session import ClientSession
from pymongo.errors import BulkWriteError, DuplicateKeyError

from ratchet_api.errors import DuplicateJobError, JobNotFoundError, StoreDataError
from ratchet_api.ids import uuid7
from ratchet_api.model import JobStatus, NodeTagFilter
from ratchet_api.store.entities import MAX_TAG_LENGTH, Completion, JobEntity
from ratchet_store_mongo._base import (
    TERMINAL,
    Doc,
    MongoBase,
    bson_value,
    lit,
    require_positive,
    require_uuid,
    set_stage,
)
from ratchet_store_mongo.documents import job_from_document, job_to_document, to_bson_datetime
from ratchet_store_mongo.errors import duplicate_key_index, translated

CLAIM_SORT = [("priority", DESCENDING), ("scheduled_at", ASCENDING), ("_id", ASCENDING)]
CREATED_ORDER = [("created_at", ASCENDING), ("_id", ASCENDING)]
ENTITY_FIELDS = tuple(f.name for f in attrs.fields(JobEntity) if f.name != "id")
_IDEMPOTENCY_RACE_RETRIES = 5


def fenced(job_id: UUID, claim_seq: int) -> Doc:
    """The filter of a fenced write: the job is RUNNING under exactly this claim."""
    require_uuid(job_id, "job_id")
    require_positive(claim_seq, "claim_seq")
    return {"_id": job_id, "status": JobStatus.RUNNING.value, "claim_seq": claim_seq}


def check_tags(job_id: UUID, tags: Sequence[str]) -> list[str]:
    if isinstance(tags, str):
        raise StoreDataError("tags", "expected a sequence of tags, got one string", job_id=job_id)
    for tag in tags:
        if not isinstance(tag, str) or not tag:
            raise StoreDataError(
                "tags", f"every tag must be a non-empty string, got {tag!r}", job_id=job_id
            )
        if len(tag) > MAX_TAG_LENGTH:
            raise StoreDataError(
                "tags",
                f"tag {tag[:20]!r}... is {len(tag)} characters, the limit is {MAX_TAG_LENGTH}",
                job_id=job_id,
            )
    return sorted(set(tags))


class JobsMixin(MongoBase):
    # ------------------------------------------------------------------ crud

    @translated("insert_job")
    def insert_job(self, job: JobEntity) -> JobEntity:
        doc = job_to_document(job)
        if job.idempotency_key is not None and self._session is not None:
            # inside a caller's transaction a duplicate key error would abort the whole
            # transaction: look the key up first (a concurrent holder still aborts it, as a
            # write conflict the caller's with_transaction retries)
            existing = self.find_by_idempotency_key(job.idempotency_key)
            if existing is not None:
                return existing
        for _ in range(_IDEMPOTENCY_RACE_RETRIES):
            try:
                self._jobs.insert_one(doc, session=self._session)
                return job_from_document(doc)
            except DuplicateKeyError as exc:
                if duplicate_key_index(exc) != "idempotency_key":
                    raise DuplicateJobError(f"job {job.id} already exists") from exc
                existing = self.find_by_idempotency_key(job.idempotency_key or "")
                if existing is not None:
                    return existing
                # the holder of the key was deleted between our insert and our read: try again
        raise DuplicateJobError(
            f"job {job.id}: idempotency key {job.idempotency_key!r} kept changing hands"
        )

    def _find_one(self, query: Doc) -> JobEntity | None:
        doc = self._jobs.find_one(query, session=self._session)
        return None if doc is None else job_from_document(doc)

    @translated("find_by_id")
    def find_by_id(self, job_id: UUID) -> JobEntity | None:
        return self._find_one({"_id": job_id})

    @translated("find_by_idempotency_key")
    def find_by_idempotency_key(self, key: str) -> JobEntity | None:
        return self._find_one({"idempotency_key": key})

    @translated("update_job")
    def update_job(self, job: JobEntity) -> JobEntity:
        doc = job_to_document(job)
        values = {name: doc[name] for name in ENTITY_FIELDS if name != "updated_at"}
        try:
            updated = self._jobs.find_one_and_update(
                {"_id": job.id},
                set_stage(values, now=("updated_at",)),
                return_document=ReturnDocument.AFTER,
                session=self._session,
            )
        except DuplicateKeyError as exc:
            raise DuplicateJobError(
                f"job {job.id}: idempotency key {job.idempotency_key!r} is held by another job"
            ) from exc
        if updated is None:
            raise JobNotFoundError(job.id)
        return job_from_document(updated)

    @translated("delete_job")
    def delete_job(self, job_id: UUID) -> bool:
        require_uuid(job_id, "job_id")

        def run(session: ClientSession) -> bool:
            deleted = self._jobs.delete_one({"_id": job_id}, session=session).deleted_count
            if deleted:
                self._col("logs").delete_many({"job_id": job_id}, session=session)
                self._col("executions").delete_many({"job_id": job_id}, session=session)
            return deleted == 1

        return self._atomic(run)

    # ------------------------------------------------------------------ claim

    @translated("claim_next_batch")
    def claim_next_batch(
        self,
        node_id: str,
        limit: int,
        *,
        execution_targets: Sequence[str] | None = None,
        tag_filter: NodeTagFilter | None = None,
    ) -> list[JobEntity]:
        require_positive(limit, "limit")
        query: Doc = {"status": JobStatus.PENDING.value, "scheduled_at": {"$lte": self._now()}}
        if execution_targets is not None:
            query["execution_target"] = {"$in": [*execution_targets, None]}
        if tag_filter is not None and not tag_filter.is_empty:
            tags: Doc = {}
            if tag_filter.required:
                tags["$all"] = sorted(tag_filter.required)
            if tag_filter.excluded:
                tags["$nin"] = sorted(tag_filter.excluded)
            query["tags"] = tags
        update = set_stage(
            {"status": JobStatus.RUNNING, "owner": node_id},
            now=("started_at", "heartbeat_at", "updated_at"),
            attempt={"$add": ["$attempt", 1]},
            claim_seq={"$add": ["$claim_seq", 1]},
        )
        claimed: list[JobEntity] = []
        # One atomic find_one_and_update per job: MongoDB has no "update the first N in this
        # order and return them" statement; each call claims the best remaining job.
        while len(claimed) < limit:
            doc = self._jobs.find_one_and_update(
                query,
                update,
                sort=CLAIM_SORT,
                return_document=ReturnDocument.AFTER,
                session=self._session,
            )
            if doc is None:
                break
            try:
                claimed.append(job_from_document(doc))
            except StoreDataError as exc:
                # never hand out (or keep re-claiming) a job that cannot be read: dead-letter it
                self._jobs.update_one(
                    {"_id": doc["_id"], "status": JobStatus.RUNNING.value},
                    set_stage(
                        {
                            "status": JobStatus.FAILED,
                            "owner": None,
                            "last_error": f"StoreDataError: {exc}",
                        },
                        now=("finished_at", "updated_at"),
                    ),
                    session=self._session,
                )
        return claimed

    # ------------------------------------------------------------------ terminal

    def _fenced_update(self, job_id: UUID, claim_seq: int, update: list[Doc]) -> bool:
        result = self._jobs.update_one(fenced(job_id, claim_seq), update, session=self._session)
        return result.modified_count == 1

    @translated("mark_succeeded")
    def mark_succeeded(self, job_id: UUID, claim_seq: int, result: str | None) -> bool:
        return self._fenced_update(
            job_id,
            claim_seq,
            set_stage(
                {"status": JobStatus.SUCCEEDED, "result": result, "owner": None},
                now=("finished_at", "updated_at"),
            ),
        )

    @translated("mark_succeeded_many")
    def mark_succeeded_many(self, completions: Sequence[Completion]) -> set[UUID]:
        if not completions:
            return set()
        # bulk_write reports counts, not which updates applied: each applied update stamps this
        # call's token, and one read by id collects the stamped jobs.
        token = uuid7()
        ops = [
            UpdateOne(
                fenced(c.job_id, c.claim_seq),
                set_stage(
                    {
                        "status": JobStatus.SUCCEEDED,
                        "result": c.result,
                        "owner": None,
                        "completion_token": token,
                    },
                    now=("finished_at", "updated_at"),
                ),
            )
            for c in completions
        ]
        self._jobs.bulk_write(ops, ordered=False, session=self._session)
        ids = list({c.job_id for c in completions})
        applied = self._jobs.find(
            {"_id": {"$in": ids}, "completion_token": token}, {"_id": 1}, session=self._session
        )
        return {doc["_id"] for doc in applied}

    @translated("mark_failed_terminal")
    def mark_failed_terminal(self, job_id: UUID, claim_seq: int, error: str) -> bool:
        return self._fenced_update(
            job_id,
            claim_seq,
            set_stage(
                {"status": JobStatus.FAILED, "last_error": error, "owner": None},
                now=("finished_at", "updated_at"),
            ),
        )

    @translated("cancel_job")
    def cancel_job(self, job_id: UUID) -> bool:
        require_uuid(job_id, "job_id")
        result = self._jobs.update_one(
            {"_id": job_id, "status": {"$nin": TERMINAL}},
            set_stage(
                {"status": JobStatus.CANCELLED, "owner": None}, now=("finished_at", "updated_at")
            ),
            session=self._session,
        )
        return result.modified_count == 1

    # ------------------------------------------------------------------ retry

    @translated("schedule_retry")
    def schedule_retry(self, job_id: UUID, claim_seq: int, run_at: datetime, error: str) -> bool:
        return self._fenced_update(
            job_id,
            claim_seq,
            set_stage(
                {
                    "status": JobStatus.PENDING,
                    "scheduled_at": to_bson_datetime(run_at, "run_at"),
                    "last_error": error,
                    "owner": None,
                    "heartbeat_at": None,
                },
                now=("updated_at",),
            ),
        )

    @translated("retry_dead_letter")
    def retry_dead_letter(self, job_id: UUID, run_at: datetime | None = None) -> bool:
        require_uuid(job_id, "job_id")
        values: Doc = {
            "status": JobStatus.PENDING,
            "attempt": 0,
            "finished_at": None,
            "owner": None,
            "heartbeat_at": None,
        }
        now = ["updated_at"]
        if run_at is None:
            now.append("scheduled_at")
        else:
            values["scheduled_at"] = to_bson_datetime(run_at, "run_at")
        result = self._jobs.update_one(
            {"_id": job_id, "status": JobStatus.FAILED.value},
            set_stage(values, now=now),
            session=self._session,
        )
        return result.modified_count == 1

    # ------------------------------------------------------------------ pause

    def _swap(
        self, job_id: UUID, expected: JobStatus, values: Doc, now: Sequence[str] = ()
    ) -> bool:
        require_uuid(job_id, "job_id")
        result = self._jobs.update_one(
            {"_id": job_id, "status": JobStatus(expected).value},
            set_stage(values, now=("updated_at", *now)),
            session=self._session,
        )
        return result.modified_count == 1

    @translated("pause_job")
    def pause_job(self, job_id: UUID) -> bool:
        return self._swap(job_id, JobStatus.PENDING, {"status": JobStatus.PAUSED})

    @translated("resume_job")
    def resume_job(self, job_id: UUID) -> bool:
        return self._swap(job_id, JobStatus.PAUSED, {"status": JobStatus.PENDING})

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
    def release_claim(self, job_id: UUID, claim_seq: int) -> bool:
        return self._fenced_update(
            job_id,
            claim_seq,
            set_stage(
                {"status": JobStatus.PENDING, "owner": None, "heartbeat_at": None},
                now=("updated_at",),
                attempt={"$max": [0, {"$subtract": ["$attempt", 1]}]},
            ),
        )

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

    @translated("find_orphaned_children")
    def find_orphaned_children(self, limit: int) -> list[JobEntity]:
        require_positive(limit, "limit")
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
        docs = [job_to_document(job) for job in jobs]  # all validated before anything is written
        if not docs:
            return 0

        def run(session: ClientSession) -> int:
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
            return len(fresh)

        for _ in range(_IDEMPOTENCY_RACE_RETRIES):
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
    def reset_orphan_jobs(self, node_ids: Sequence[str]) -> int:
        if not node_ids:
            return 0
        return self._reset_running({"owner": {"$in": list(node_ids)}}, due_now=True)

    @translated("find_stale_running_jobs")
    def find_stale_running_jobs(self, heartbeat_before: datetime, limit: int) -> list[JobEntity]:
        require_positive(limit, "limit")
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
        require_positive(limit, "limit")
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


__all__ = ["CLAIM_SORT", "CREATED_ORDER", "JobsMixin", "bson_value", "fenced"]
