"""The mandatory job sub-protocols: crud, claim, terminal, retry, pause, status, bulk, tags."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from uuid import UUID

import attrs
from pymongo import ASCENDING, DESCENDING, ReturnDocument, UpdateOne
from pymongo.client_session import ClientSession
from pymongo.errors import DuplicateKeyError, PyMongoError

from ratchet_api.errors import DuplicateJobError, JobNotFoundError, StoreDataError
from ratchet_api.ids import uuid7
from ratchet_api.model import JobStatus, NodeTagFilter
from ratchet_api.store.entities import MAX_TAG_LENGTH, Completion, JobEntity
from ratchet_api.store.fairness import fair_claim_order
from ratchet_store_mongo._base import (
    NOW,
    TERMINAL,
    Doc,
    MongoBase,
    require_non_negative,
    require_uuid,
    set_stage,
)
from ratchet_store_mongo.documents import job_from_document, job_to_document, to_bson_datetime
from ratchet_store_mongo.errors import duplicate_key_index, translated

CLAIM_SORT = [("priority", DESCENDING), ("scheduled_at", ASCENDING), ("_id", ASCENDING)]
CREATED_ORDER = [("created_at", ASCENDING), ("_id", ASCENDING)]
ENTITY_FIELDS = tuple(f.name for f in attrs.fields(JobEntity) if f.name != "id")
IDEMPOTENCY_RACE_RETRIES = 5

_log = logging.getLogger("ratchet.store.mongo")


def fenced(job_id: UUID, claim_seq: int) -> Doc:
    """The filter of a fenced write: the job is RUNNING under exactly this claim."""
    require_uuid(job_id, "job_id")
    require_non_negative(claim_seq, "claim_seq")
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


FAIR_PROBE_SECONDS = 1.0
"""How long a claim trusts its last look at whether any PENDING job has a fairness key (this
store's own keyed inserts are seen at once)."""


@attrs.define
class _FairProbe:
    keyed: bool = False
    seen: float = -FAIR_PROBE_SECONDS


class JobsMixin(MongoBase):
    # ------------------------------------------------------------------ crud

    @translated("insert_job")
    def insert_job(self, job: JobEntity) -> JobEntity:
        doc = job_to_document(job)
        self._note_keyed((job,))
        if job.idempotency_key is not None and self._session is not None:
            # inside a caller's transaction a duplicate key error would abort the whole
            # transaction: look the key up first (a concurrent holder still aborts it, as a
            # write conflict the caller's with_transaction retries)
            existing = self.find_by_idempotency_key(job.idempotency_key)
            if existing is not None:
                return existing
        for _ in range(IDEMPOTENCY_RACE_RETRIES):
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
        return self._claim_jobs(node_id, limit, execution_targets, tag_filter, start=0)

    def _claim_jobs(
        self,
        node_id: str,
        limit: int,
        execution_targets: Sequence[str] | None,
        tag_filter: NodeTagFilter | None,
        *,
        start: int,
    ) -> list[JobEntity]:
        """The claim; the first ``start`` jobs claimed (in claim order) are marked started by
        their own claim update (``dispatched_at`` = that update's ``$$NOW``, equal to its
        ``started_at``): ``WorkerBatchStore.claim_and_start``."""
        require_non_negative(limit, "limit")
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
            {"status": JobStatus.RUNNING, "owner": node_id, "dispatched_at": None},
            now=("started_at", "heartbeat_at", "updated_at"),
            attempt={"$add": ["$attempt", 1]},
            claim_seq={"$add": ["$claim_seq", 1]},
        )
        marking = set_stage(
            {"status": JobStatus.RUNNING, "owner": node_id},
            now=("started_at", "heartbeat_at", "updated_at", "dispatched_at"),
            attempt={"$add": ["$attempt", 1]},
            claim_seq={"$add": ["$claim_seq", 1]},
        )
        if limit > 0 and self._fair_claims_needed():
            return self._claim_fair(query, update, marking, limit, start)
        claimed: list[JobEntity] = []
        # One atomic find_one_and_update per job: MongoDB has no "update the first N in this
        # order and return them" statement; each call claims the best remaining job.
        while len(claimed) < limit:
            try:
                if not self._claim_one(query, marking if len(claimed) < start else update, claimed):
                    break
            except PyMongoError as exc:
                if not claimed or self._session is not None:
                    # nothing claimed yet, or the caller's session owns the unit of work (its
                    # transaction is spoiled): the caller sees the (translated) error
                    raise
                # The jobs already claimed are RUNNING under this node: hand them out rather
                # than leave them unknown to the worker until stale recovery burns an attempt.
                _log.warning(
                    "claim stopped after %d of %d jobs: %s; returning the claimed jobs",
                    len(claimed),
                    limit,
                    exc,
                )
                break
        return claimed

    # ------------------------------------------------------------------ fair claim

    def claims_fairly(self) -> bool:
        """``FairClaimStore``: while any PENDING job has a fairness key, a claim takes the
        head of each key (and of the unkeyed group) in turn (``_claim_fair``)."""
        return True

    def _fair_probe(self) -> _FairProbe:
        probe = self.__dict__.get("_fair_state")
        if not isinstance(probe, _FairProbe):
            probe = _FairProbe()
            self.__dict__["_fair_state"] = probe
        return probe

    def _note_keyed(self, jobs: Sequence[JobEntity]) -> None:
        """This store writes ``jobs``: a keyed one makes the next claims fair at once."""
        if any(job.fairness_key is not None for job in jobs):
            probe = self._fair_probe()
            probe.keyed, probe.seen = True, time.monotonic()

    def _fair_claims_needed(self) -> bool:
        """Whether any PENDING job has a fairness key: one probe through the ``fairness``
        index, repeated at most every ``FAIR_PROBE_SECONDS``."""
        probe = self._fair_probe()
        clock = time.monotonic()
        if clock - probe.seen >= FAIR_PROBE_SECONDS:
            found = self._jobs.find_one(
                {"status": JobStatus.PENDING.value, "fairness_key": {"$type": "string"}},
                {"_id": 1},
                session=self._session,
            )
            probe.keyed, probe.seen = found is not None, clock
        return probe.keyed

    def _claim_fair(
        self, query: Doc, update: list[Doc], marking: list[Doc], limit: int, start: int
    ) -> list[JobEntity]:
        """The fair claim: the head (first in claim order) of every fairness key with a
        PENDING job and of the unkeyed group is read; the best head by (priority desc, rank,
        due time, id) is claimed (a find_one_and_update on its id, still PENDING), and its
        group's next head read. A group's rank is the jobs this claim took from it plus one,
        plus, for a key, its RUNNING jobs: the order of ``FairClaimStore``."""
        pending = {"status": JobStatus.PENDING.value, "fairness_key": {"$type": "string"}}
        keys: list[str | None] = [
            *sorted(self._jobs.distinct("fairness_key", pending, session=self._session)),
            None,
        ]
        running = {
            row["_id"]: int(row["n"])
            for row in self._jobs.aggregate(
                [
                    {
                        "$match": {
                            "status": JobStatus.RUNNING.value,
                            "fairness_key": {"$type": "string"},
                        }
                    },
                    {"$group": {"_id": "$fairness_key", "n": {"$sum": 1}}},
                ],
                session=self._session,
            )
        }
        taken: dict[str | None, int] = {}
        heads: dict[str | None, Doc] = {}

        def read_head(key: str | None) -> None:
            # a key's head through the partial `fairness` index (its filter named as such)
            match: Doc | None = {"$eq": key, "$type": "string"} if key is not None else None
            doc = self._jobs.find_one(
                {**query, "fairness_key": match},
                {"_id": 1, "priority": 1, "scheduled_at": 1},
                sort=CLAIM_SORT,
                session=self._session,
            )
            if doc is None:
                heads.pop(key, None)
            else:
                heads[key] = doc

        for key in keys:
            read_head(key)
        claimed: list[JobEntity] = []
        while heads and len(claimed) < limit:

            def order(key: str | None) -> tuple[int, int, datetime, UUID]:
                head = heads[key]
                rank = taken.get(key, 0) + 1 + (running.get(key, 0) if key is not None else 0)
                return (-int(head["priority"]), rank, head["scheduled_at"], head["_id"])

            key = min(heads, key=order)
            head_id = heads[key]["_id"]
            try:
                won = self._claim_one(
                    {**query, "_id": head_id},
                    marking if len(claimed) < start else update,
                    claimed,
                )
            except PyMongoError as exc:
                if not claimed or self._session is not None:
                    raise
                _log.warning(
                    "claim stopped after %d of %d jobs: %s; returning the claimed jobs",
                    len(claimed),
                    limit,
                    exc,
                )
                break
            if won:
                taken[key] = taken.get(key, 0) + 1
            read_head(key)  # the next job of the group (or the same group after a lost race)
        return fair_claim_order(claimed)

    def _claim_one(self, query: Doc, update: list[Doc], claimed: list[JobEntity]) -> bool:
        """Claim the best due job into ``claimed``; False when none is due."""
        doc = self._jobs.find_one_and_update(
            query,
            update,
            sort=CLAIM_SORT,
            return_document=ReturnDocument.AFTER,
            session=self._session,
        )
        if doc is None:
            return False
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
        return True

    # ------------------------------------------------------------------ terminal

    @translated("mark_dispatched")
    def mark_dispatched(self, claims: Mapping[UUID, int]) -> set[UUID]:
        if not claims:
            return set()
        pairs = [fenced(job_id, seq) for job_id, seq in claims.items()]
        # the first mark of a claim stands; one update for the whole batch, then one read of
        # which claims are current (a claim superseded in between is reported as not current)
        self._jobs.update_many(
            {"$or": pairs},
            [{"$set": {"dispatched_at": {"$ifNull": ["$dispatched_at", NOW]}}}],
            session=self._session,
        )
        current = self._jobs.find(
            {"_id": {"$in": list(claims)}, "status": JobStatus.RUNNING.value},
            {"_id": 1, "claim_seq": 1, "dispatched_at": 1},
            session=self._session,
        )
        return {
            d["_id"]
            for d in current
            if d["claim_seq"] == claims[d["_id"]] and d.get("dispatched_at") is not None
        }

    def _fenced_update(self, job_id: UUID, claim_seq: int, update: list[Doc]) -> bool:
        result = self._jobs.update_one(fenced(job_id, claim_seq), update, session=self._session)
        return result.modified_count == 1

    @translated("mark_succeeded")
    def mark_succeeded(self, job_id: UUID, claim_seq: int, result: str | None) -> bool:
        return self._finish_one(
            fenced(job_id, claim_seq),
            set_stage(
                {"status": JobStatus.SUCCEEDED, "result": result, "owner": None},
                now=("finished_at", "updated_at"),
            ),
            True,
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
        ids = list({c.job_id for c in completions})
        self._jobs.bulk_write(ops, ordered=False, session=self._session)
        applied = list(
            self._jobs.find(
                {"_id": {"$in": ids}, "completion_token": token},
                {"_id": 1, "batch_id": 1},
                session=self._session,
            )
        )
        # batch children are counted right after (see MongoBase._finish_one)
        per_batch: dict[UUID, int] = {}
        for doc in applied:
            if doc.get("batch_id") is not None:
                per_batch[doc["batch_id"]] = per_batch.get(doc["batch_id"], 0) + 1
        for batch_id, count in sorted(per_batch.items()):
            self._col("batches").update_one(
                {"_id": batch_id}, {"$inc": {"succeeded": count}}, session=self._session
            )
        return {doc["_id"] for doc in applied}

    @translated("mark_failed_terminal")
    def mark_failed_terminal(self, job_id: UUID, claim_seq: int, error: str) -> bool:
        return self._finish_one(
            fenced(job_id, claim_seq),
            set_stage(
                {"status": JobStatus.FAILED, "last_error": error, "owner": None},
                now=("finished_at", "updated_at"),
            ),
            False,
        )

    @translated("cancel_job")
    def cancel_job(self, job_id: UUID) -> bool:
        require_uuid(job_id, "job_id")
        return self._finish_one(
            {"_id": job_id, "status": {"$nin": TERMINAL}},
            set_stage(
                {"status": JobStatus.CANCELLED, "owner": None}, now=("finished_at", "updated_at")
            ),
            False,
        )

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


__all__ = ["CLAIM_SORT", "CREATED_ORDER", "JobsMixin", "fenced"]
