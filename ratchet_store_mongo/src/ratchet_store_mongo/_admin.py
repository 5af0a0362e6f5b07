"""Archive, query, analytics, audit and extension (properties/state) capabilities."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from pymongo import ASCENDING, DESCENDING
from pymongo.client_session import ClientSession

from ratchet_api.errors import JobNotFoundError, StoreDataError
from ratchet_api.ids import uuid7
from ratchet_api.model import JobStatus, StateWriteResult, VersionedState
from ratchet_api.store.entities import (
    ExecutionRecord,
    JobEntity,
    JobLogLine,
    JobQuery,
    SortOrder,
)
from ratchet_store_mongo._base import (
    TERMINAL,
    Doc,
    MongoBase,
    require_key,
    require_non_negative,
    require_uuid,
)
from ratchet_store_mongo.documents import (
    from_document,
    job_from_document,
    to_bson_datetime,
    to_document,
)
from ratchet_store_mongo.errors import translated


def _fence(expected_claim_seq: int | None) -> Doc:
    if expected_claim_seq is None:
        return {}
    require_non_negative(expected_claim_seq, "expected_claim_seq")
    return {"status": JobStatus.RUNNING.value, "claim_seq": expected_claim_seq}


def _props(doc: Mapping[str, Any], job_id: object) -> dict[str, str]:
    props = doc.get("props", [])
    if not isinstance(props, list):
        raise StoreDataError(
            "props",
            f"expected an array, got {type(props).__name__}",
            job_id=job_id if isinstance(job_id, UUID) else None,
        )
    return {p["k"]: p["v"] for p in props if isinstance(p, dict)}


class AdminMixin(MongoBase):
    # ------------------------------------------------------------------ archive

    def _archive(self, query: Doc, limit: int) -> int:
        """Move up to ``limit`` terminal jobs matching ``query`` in one transaction (a status
        filter in ``query``, of terminal statuses only, replaces the terminal one)."""
        query = {"status": {"$in": TERMINAL}, **query}

        def run(session: ClientSession) -> int:
            docs = list(
                self._jobs.find(query, session=session)
                .sort([("finished_at", ASCENDING), ("_id", ASCENDING)])
                .limit(limit)
            )
            if not docs:
                return 0
            for doc in docs:
                job_from_document(doc)  # never archive what cannot be read back
            self._col("archive").insert_many(docs, session=session)
            ids = [d["_id"] for d in docs]
            return self._jobs.delete_many({"_id": {"$in": ids}}, session=session).deleted_count

        return self._atomic(run)

    @translated("archive_job")
    def archive_job(self, job_id: UUID) -> bool:
        require_uuid(job_id, "job_id")
        return self._archive({"_id": job_id}, 1) == 1

    @translated("archive_finished_before")
    def archive_finished_before(
        self, cutoff: datetime, limit: int, statuses: Collection[JobStatus] | None = None
    ) -> int:
        require_non_negative(limit, "limit")
        query: Doc = {"finished_at": {"$lt": to_bson_datetime(cutoff, "cutoff")}}
        if statuses is not None:
            chosen = {JobStatus(x) for x in statuses}
            wrong = sorted(x.value for x in chosen if not x.is_terminal)
            if wrong:
                raise StoreDataError(
                    "statuses", f"only terminal statuses are archived, got {wrong}"
                )
            if not chosen:
                return 0
            query["status"] = {"$in": sorted(x.value for x in chosen)}
        if limit == 0:
            return 0
        return self._archive(query, limit)

    @translated("delete_archived_before")
    def delete_archived_before(self, cutoff: datetime, limit: int) -> int:
        require_non_negative(limit, "limit")
        query: Doc = {"finished_at": {"$lt": to_bson_datetime(cutoff, "cutoff")}}
        if limit == 0:
            return 0
        archive = self._col("archive")

        def run(session: ClientSession) -> int:
            ids = [
                d["_id"]
                for d in archive.find(query, {"_id": 1}, session=session)
                .sort([("finished_at", ASCENDING), ("_id", ASCENDING)])
                .limit(limit)
            ]
            if not ids:
                return 0
            deleted = archive.delete_many({"_id": {"$in": ids}}, session=session)
            self._col("logs").delete_many({"job_id": {"$in": ids}}, session=session)
            self._col("executions").delete_many({"job_id": {"$in": ids}}, session=session)
            return deleted.deleted_count

        return self._atomic(run)

    @translated("find_archived_job")
    def find_archived_job(self, job_id: UUID) -> JobEntity | None:
        doc = self._col("archive").find_one({"_id": job_id}, session=self._session)
        return None if doc is None else job_from_document(doc)

    @translated("find_archived_jobs")
    def find_archived_jobs(self, limit: int, offset: int = 0) -> list[JobEntity]:
        require_non_negative(limit, "limit")
        require_non_negative(offset, "offset")
        if limit == 0:
            return []
        cursor = (
            self._col("archive")
            .find({}, session=self._session)
            .sort([("finished_at", DESCENDING), ("_id", DESCENDING)])
            .skip(offset)
            .limit(limit)
        )
        return [job_from_document(d) for d in cursor]

    # ------------------------------------------------------------------ query

    @staticmethod
    def _query_filter(query: JobQuery) -> Doc:
        filt: Doc = {}
        if query.statuses is not None:
            filt["status"] = {"$in": sorted(JobStatus(s).value for s in query.statuses)}
        if query.target is not None:
            filt["target"] = query.target
        if query.tag is not None:
            filt["tags"] = query.tag
        if query.job_type is not None:
            filt["job_type"] = query.job_type.value
        if query.parent_id is not None:
            filt["parent_id"] = query.parent_id
        if query.batch_id is not None:
            filt["batch_id"] = query.batch_id
        created: Doc = {}
        if query.created_after is not None:
            created["$gte"] = to_bson_datetime(query.created_after, "created_after")
        if query.created_before is not None:
            created["$lt"] = to_bson_datetime(query.created_before, "created_before")
        if created:
            filt["created_at"] = created
        if query.properties:
            filt["$and"] = [
                {"props": {"$elemMatch": {"k": key, "v": value}}}
                for key, value in sorted(query.properties.items())
            ]
        return filt

    @translated("search_jobs")
    def search_jobs(self, query: JobQuery) -> list[JobEntity]:
        direction = DESCENDING if query.order is SortOrder.NEWEST_FIRST else ASCENDING
        if query.preview is not None:  # a listing: never load a large argument or result
            return self._search_preview(query, direction)
        cursor = (
            self._jobs.find(self._query_filter(query), session=self._session)
            .sort([("created_at", direction), ("_id", direction)])
            .skip(query.offset)
            .limit(query.limit)
        )
        return [job_from_document(d) for d in cursor]

    def _search_preview(self, query: JobQuery, direction: int) -> list[JobEntity]:
        """``search_jobs`` with ``payload`` and ``result`` cut by the server to their first
        ``preview + 1`` code points (a ``None`` result stays ``None``)."""
        assert query.preview is not None
        cut = query.preview + 1

        def first(field: str) -> Doc:
            return {
                "$cond": [
                    {"$eq": [{"$type": f"${field}"}, "string"]},
                    {"$substrCP": [f"${field}", 0, cut]},
                    f"${field}",
                ]
            }

        cursor = self._jobs.aggregate(
            [
                {"$match": self._query_filter(query)},
                {"$sort": {"created_at": direction, "_id": direction}},
                {"$skip": query.offset},
                {"$limit": query.limit},
                {"$addFields": {"payload": first("payload"), "result": first("result")}},
            ],
            session=self._session,
        )
        return [job_from_document(d) for d in cursor]

    @translated("count_jobs")
    def count_jobs(self, query: JobQuery) -> int:
        return self._jobs.count_documents(self._query_filter(query), session=self._session)

    @translated("find_job_ids_by_tag")
    def find_job_ids_by_tag(self, tag: str, limit: int) -> list[UUID]:
        require_non_negative(limit, "limit")
        if limit == 0:
            return []
        cursor = (
            self._jobs.find({"tags": tag}, {"_id": 1}, session=self._session)
            .sort([("created_at", ASCENDING), ("_id", ASCENDING)])
            .limit(limit)
        )
        return [d["_id"] for d in cursor]

    # ------------------------------------------------------------------ analytics

    def _count_by_status(self, match: Doc) -> dict[JobStatus, int]:
        rows = self._jobs.aggregate(
            [{"$match": match}, {"$group": {"_id": "$status", "n": {"$sum": 1}}}],
            session=self._session,
        )
        counts: dict[JobStatus, int] = {}
        for row in rows:
            try:
                counts[JobStatus(row["_id"])] = int(row["n"])
            except ValueError as exc:
                raise StoreDataError(
                    "status", f"{row['_id']!r} is not a JobStatus ({row['n']} jobs)"
                ) from exc
        return counts

    @translated("count_jobs_by_status")
    def count_jobs_by_status(self) -> dict[JobStatus, int]:
        counts = self._count_by_status({})
        return {status: counts.get(status, 0) for status in JobStatus}

    @translated("count_finished_since")
    def count_finished_since(self, since: datetime) -> dict[JobStatus, int]:
        counts = self._count_by_status(
            {
                "status": {"$in": TERMINAL},
                "finished_at": {"$gte": to_bson_datetime(since, "since")},
            }
        )
        return {JobStatus(s): counts.get(JobStatus(s), 0) for s in TERMINAL}

    def _percentile(self, percentile: float, match: Doc, start: str, end: str) -> timedelta | None:
        if not 0 <= percentile <= 100:
            raise StoreDataError("percentile", f"must be between 0 and 100, got {percentile!r}")
        match = dict(match)
        for field in (start, end):
            match[field] = {**match.get(field, {}), "$type": "date"}
        total = self._jobs.count_documents(match, session=self._session)
        if total == 0:
            return None
        rank = max(1, math.ceil(percentile / 100 * total))  # nearest rank, 1-based
        rows = list(
            self._jobs.aggregate(
                [
                    {"$match": match},
                    {"$project": {"_id": 0, "ms": {"$subtract": [f"${end}", f"${start}"]}}},
                    {"$sort": {"ms": 1}},
                    {"$skip": rank - 1},
                    {"$limit": 1},
                ],
                session=self._session,
            )
        )
        return timedelta(milliseconds=int(rows[0]["ms"])) if rows else None

    @translated("execution_time_percentile")
    def execution_time_percentile(self, percentile: float, since: datetime) -> timedelta | None:
        return self._percentile(
            percentile,
            {
                "status": JobStatus.SUCCEEDED.value,
                "finished_at": {"$gte": to_bson_datetime(since, "since")},
            },
            "started_at",
            "finished_at",
        )

    @translated("queue_wait_percentile")
    def queue_wait_percentile(self, percentile: float, since: datetime) -> timedelta | None:
        return self._percentile(
            percentile,
            {"started_at": {"$gte": to_bson_datetime(since, "since")}},
            "scheduled_at",
            "started_at",
        )

    # ------------------------------------------------------------------ audit

    @translated("save_execution")
    def save_execution(self, record: ExecutionRecord) -> None:
        self._col("executions").insert_one(to_document(record), session=self._session)

    @translated("save_executions")
    def save_executions(self, records: Sequence[ExecutionRecord]) -> None:
        docs = [to_document(r) for r in records]
        if docs:
            self._col("executions").insert_many(docs, ordered=True, session=self._session)

    @translated("find_executions_by_job_id")
    def find_executions_by_job_id(self, job_id: UUID) -> list[ExecutionRecord]:
        cursor = (
            self._col("executions")
            .find({"job_id": job_id}, session=self._session)
            .sort([("attempt", ASCENDING), ("started_at", ASCENDING), ("_id", ASCENDING)])
        )
        return [from_document(ExecutionRecord, d) for d in cursor]

    @translated("append_logs")
    def append_logs(self, lines: Sequence[JobLogLine]) -> None:
        # the _id is a UUIDv7 made here, so sorting by _id gives the order of appending
        docs = [{"_id": uuid7(), **to_document(line)} for line in lines]
        if docs:
            self._col("logs").insert_many(docs, ordered=True, session=self._session)

    @translated("find_logs_by_job_id")
    def find_logs_by_job_id(self, job_id: UUID, limit: int = 1000) -> list[JobLogLine]:
        require_non_negative(limit, "limit")
        if limit == 0:
            return []
        cursor = (
            self._col("logs")
            .find({"job_id": job_id}, session=self._session)
            .sort("_id", ASCENDING)
            .limit(limit)
        )
        return [from_document(JobLogLine, d) for d in cursor]

    # ------------------------------------------------------------------ extension

    def _require_job(self, job_id: UUID) -> Doc:
        doc = self._jobs.find_one(
            {"_id": job_id},
            {"status": 1, "claim_seq": 1, "props": 1, "state": 1},
            session=self._session,
        )
        if doc is None:
            raise JobNotFoundError(job_id)
        return doc

    def _ext_doc(self, job_id: UUID, projection: Doc) -> Doc | None:
        """The extension data of a job, live or archived (archiving moves it with the job)."""
        for name in ("jobs", "archive"):
            doc = self._col(name).find_one({"_id": job_id}, projection, session=self._session)
            if doc is not None:
                return doc
        return None

    @translated("put_property")
    def put_property(self, job_id: UUID, key: str, value: str) -> bool:
        require_uuid(job_id, "job_id")
        require_key(key, "key", job_id)
        if not isinstance(value, str):
            raise StoreDataError(
                "value", f"must be a string, got {type(value).__name__}", job_id=job_id
            )
        result = self._jobs.update_one(
            {"_id": job_id, "props.k": {"$ne": key}},
            {"$push": {"props": {"k": key, "v": value}}},
            session=self._session,
        )
        if result.modified_count == 1:
            return True
        self._require_job(job_id)
        return False

    @translated("get_property")
    def get_property(self, job_id: UUID, key: str) -> str | None:
        doc = self._ext_doc(job_id, {"props": 1})
        return None if doc is None else _props(doc, job_id).get(key)

    @translated("get_properties_by_prefix")
    def get_properties_by_prefix(self, job_id: UUID, prefix: str) -> dict[str, str]:
        doc = self._ext_doc(job_id, {"props": 1})
        if doc is None:
            return {}
        return {k: v for k, v in sorted(_props(doc, job_id).items()) if k.startswith(prefix)}

    @translated("properties_for_jobs")
    def properties_for_jobs(self, job_ids: Sequence[UUID]) -> Mapping[UUID, dict[str, str]]:
        if not job_ids:
            return {}
        found: dict[UUID, dict[str, str]] = {}
        missing = list(job_ids)
        for name in ("jobs", "archive"):
            if not missing:
                break
            cursor = self._col(name).find(
                {"_id": {"$in": missing}}, {"props": 1}, session=self._session
            )
            found.update({d["_id"]: _props(d, d["_id"]) for d in cursor})
            missing = [i for i in missing if i not in found]
        return found

    @translated("get_state")
    def get_state(self, job_id: UUID, namespace: str) -> VersionedState | None:
        doc = self._ext_doc(job_id, {"state": 1})
        if doc is None:
            return None
        for entry in doc.get("state") or []:
            if isinstance(entry, dict) and entry.get("ns") == namespace:
                return VersionedState(json=entry["json"], version=entry["v"])
        return None

    def _state_failure(self, job_id: UUID, expected_claim_seq: int | None) -> StateWriteResult:
        """Why a state write matched nothing: the fence first, then the version."""
        doc = self._jobs.find_one(
            {"_id": job_id}, {"status": 1, "claim_seq": 1}, session=self._session
        )
        if doc is None:
            if expected_claim_seq is not None:
                return StateWriteResult.SUPERSEDED
            raise JobNotFoundError(job_id)
        if expected_claim_seq is not None and (
            doc.get("status") != JobStatus.RUNNING.value
            or doc.get("claim_seq") != expected_claim_seq
        ):
            return StateWriteResult.SUPERSEDED
        return StateWriteResult.VERSION_CONFLICT

    @translated("init_state")
    def init_state(
        self, job_id: UUID, namespace: str, state: str, expected_claim_seq: int | None = None
    ) -> StateWriteResult:
        require_uuid(job_id, "job_id")
        require_key(namespace, "namespace", job_id)
        if not isinstance(state, str):
            raise StoreDataError(
                "state", f"must be a string, got {type(state).__name__}", job_id=job_id
            )
        result = self._jobs.update_one(
            {"_id": job_id, "state.ns": {"$ne": namespace}, **_fence(expected_claim_seq)},
            {"$push": {"state": {"ns": namespace, "json": state, "v": 0}}},
            session=self._session,
        )
        if result.modified_count == 1:
            return StateWriteResult.UPDATED
        return self._state_failure(job_id, expected_claim_seq)

    @translated("update_state")
    def update_state(
        self,
        job_id: UUID,
        namespace: str,
        state: str,
        expected_version: int,
        expected_claim_seq: int | None = None,
    ) -> StateWriteResult:
        require_uuid(job_id, "job_id")
        require_non_negative(expected_version, "expected_version")
        require_key(namespace, "namespace", job_id)
        if not isinstance(state, str):
            raise StoreDataError(
                "state", f"must be a string, got {type(state).__name__}", job_id=job_id
            )
        result = self._jobs.update_one(
            {
                "_id": job_id,
                "state": {"$elemMatch": {"ns": namespace, "v": expected_version}},
                **_fence(expected_claim_seq),
            },
            {"$set": {"state.$.json": state, "state.$.v": expected_version + 1}},
            session=self._session,
        )
        if result.modified_count == 1:
            return StateWriteResult.UPDATED
        return self._state_failure(job_id, expected_claim_seq)


__all__ = ["AdminMixin"]
