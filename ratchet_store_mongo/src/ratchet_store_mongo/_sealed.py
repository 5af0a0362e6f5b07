"""``SealedValueStore`` and ``SealedArchiveStore``: the stored values payload encryption seals,
in live and in archived jobs, read in pages and rewritten by compare and set (key rotation).

An archived job is the job's document moved to the ``archive`` collection as it was (state
included), so both capabilities read and write the same fields, each on its own collection; the
workflow conditions stay in ``conditions`` for live and archived children alike."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from pymongo import ASCENDING, UpdateOne
from pymongo.collection import Collection

from ratchet_api.errors import StoreDataError
from ratchet_api.store.entities import STORED_VALUE_COLUMNS, StoredValue
from ratchet_store_mongo._base import Doc, MongoBase
from ratchet_store_mongo.errors import translated

_JOB_COLUMNS = ("payload", "result", "last_error", "signal_payload")


class MongoSealedValueMixin(MongoBase):
    @translated("scan_values")
    def scan_values(self, after: UUID | None, limit: int) -> list[StoredValue]:
        return self._scan_sealed(self._jobs, after, limit)

    @translated("replace_values")
    def replace_values(self, changes: Sequence[tuple[StoredValue, str]]) -> int:
        return self._replace_sealed(self._jobs, changes)

    @translated("scan_archived_values")
    def scan_archived_values(self, after: UUID | None, limit: int) -> list[StoredValue]:
        return self._scan_sealed(self._col("archive"), after, limit)

    @translated("replace_archived_values")
    def replace_archived_values(self, changes: Sequence[tuple[StoredValue, str]]) -> int:
        return self._replace_sealed(self._col("archive"), changes)

    def _scan_sealed(
        self, collection: Collection[Doc], after: UUID | None, limit: int
    ) -> list[StoredValue]:
        if limit < 1:
            raise StoreDataError("limit", f"must be at least 1, got {limit}")
        query: dict[str, Any] = {} if after is None else {"_id": {"$gt": after}}
        projection = {column: 1 for column in (*_JOB_COLUMNS, "state")}
        cursor = (
            collection.find(query, projection, session=self._session)
            .sort("_id", ASCENDING)
            .limit(limit)
        )
        values: list[StoredValue] = []
        docs = list(cursor)
        conditions = {
            c["child_job_id"]: c["expression"]
            for c in self._col("conditions").find(
                {
                    "child_job_id": {"$in": [d["_id"] for d in docs]},
                    "expression": {"$type": "string"},
                },
                {"child_job_id": 1, "expression": 1},
                session=self._session,
            )
        }
        for doc in docs:
            job_id = doc["_id"]
            for column in _JOB_COLUMNS:
                text = doc.get(column)
                if isinstance(text, str):
                    values.append(StoredValue(job_id=job_id, column=column, text=text))
            entries = [e for e in doc.get("state") or [] if isinstance(e, dict)]
            for entry in sorted(entries, key=lambda e: str(e.get("ns"))):
                values.append(
                    StoredValue(
                        job_id=job_id, column="state", namespace=entry["ns"], text=entry["json"]
                    )
                )
            if job_id in conditions:
                values.append(
                    StoredValue(job_id=job_id, column="condition", text=conditions[job_id])
                )
        return values

    def _replace_sealed(
        self, collection: Collection[Doc], changes: Sequence[tuple[StoredValue, str]]
    ) -> int:
        for value, _ in changes:
            _check_column(value)
        conditions = [(v, t) for v, t in changes if v.column == "condition"]
        operations = [_replacement(v, t) for v, t in changes if v.column != "condition"]
        written = 0
        if conditions:
            # only the conditions of children in this collection (live or archived)
            present = {
                d["_id"]
                for d in collection.find(
                    {"_id": {"$in": list({v.job_id for v, _ in conditions})}},
                    {"_id": 1},
                    session=self._session,
                )
            }
            updates = [
                UpdateOne(
                    {"child_job_id": value.job_id, "expression": value.text},
                    {"$set": {"expression": new_text}},
                )
                for value, new_text in conditions
                if value.job_id in present
            ]
            if updates:
                result = self._col("conditions").bulk_write(
                    updates, ordered=True, session=self._session
                )
                written += int(result.matched_count)
        if not operations:
            return written
        # One ordered bulk write per call: each update is atomic on its document, and a value
        # that changed meanwhile simply matches nothing (the compare and set).
        result = collection.bulk_write(operations, ordered=True, session=self._session)
        return written + int(result.matched_count)


def _check_column(value: StoredValue) -> None:
    if value.column not in STORED_VALUE_COLUMNS:
        raise StoreDataError(
            "column", f"{value.column!r} is not one of {', '.join(STORED_VALUE_COLUMNS)}"
        )


def _replacement(value: StoredValue, new_text: str) -> UpdateOne:
    if value.column == "state":
        return UpdateOne(
            {
                "_id": value.job_id,
                "state": {"$elemMatch": {"ns": value.namespace, "json": value.text}},
            },
            {"$set": {"state.$.json": new_text}},
        )
    return UpdateOne(
        {"_id": value.job_id, value.column: value.text}, {"$set": {value.column: new_text}}
    )


__all__ = ["MongoSealedValueMixin"]
