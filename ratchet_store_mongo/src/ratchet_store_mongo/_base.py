"""Shared state and helpers of the Mongo store's parts."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar
from uuid import UUID

from bson.codec_options import CodecOptions
from pymongo import MongoClient
from pymongo.client_session import ClientSession
from pymongo.collection import Collection
from pymongo.database import Database

from ratchet_api.errors import StoreDataError
from ratchet_api.model import TERMINAL_STATUSES
from ratchet_api.store.entities import MAX_KEY_LENGTH
from ratchet_store_mongo.documents import to_bson_datetime

T = TypeVar("T")
Doc = dict[str, Any]

NOW = "$$NOW"
TERMINAL = [s.value for s in TERMINAL_STATUSES]


def bson_value(value: Any, field: str = "value") -> Any:
    """A Python value as it is stored (datetimes truncated to milliseconds, enums by value)."""
    if isinstance(value, datetime):
        return to_bson_datetime(value, field)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [bson_value(v, field) for v in value]
    return value


def lit(value: Any, field: str = "value") -> Doc:
    """A constant inside an aggregation-pipeline update (a string starting with ``$`` must
    never be read as a field path)."""
    return {"$literal": bson_value(value, field)}


def set_stage(values: Mapping[str, Any], now: Iterable[str] = (), **exprs: Any) -> list[Doc]:
    """A one-stage pipeline update: constants from ``values``, the server's ``$$NOW`` for every
    field in ``now`` (one value per operation, so those fields are equal) and raw expressions."""
    fields: Doc = {key: lit(value, key) for key, value in values.items()}
    fields.update({key: NOW for key in now})
    fields.update(exprs)
    return [{"$set": fields}]


def now_plus(delta: timedelta) -> Doc:
    """``$$NOW + delta`` as an aggregation expression (milliseconds)."""
    return {"$add": [NOW, int(delta.total_seconds() * 1000)]}


def require_non_negative(value: int, field: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise StoreDataError(field, f"must be a non-negative integer, got {value!r}")


def require_key(value: str, field: str, job_id: UUID | None = None) -> str:
    """A non-empty key of at most ``MAX_KEY_LENGTH`` characters (property key, namespace, lock
    name, resource key, signal key)."""
    if not isinstance(value, str) or not value:
        raise StoreDataError(field, f"must be a non-empty string, got {value!r}", job_id=job_id)
    if len(value) > MAX_KEY_LENGTH:
        raise StoreDataError(
            field, f"is {len(value)} characters, the limit is {MAX_KEY_LENGTH}", job_id=job_id
        )
    return value


def require_uuid(value: UUID, field: str) -> None:
    if not isinstance(value, UUID):
        raise StoreDataError(field, f"must be a UUID, got {type(value).__name__} {value!r}")


class MongoBase:
    """The client, the collections and the (optional) caller session of a store view."""

    _client: MongoClient[Doc]
    _db: Database[Doc]
    _prefix: str
    _session: ClientSession | None
    _codec: CodecOptions[Any]

    def _now(self) -> datetime:
        """The server's clock (``hello``'s ``localTime``, millisecond precision).

        Filters compare stored dates with this value instead of ``$$NOW`` inside ``$expr``:
        plain range queries use indexes, and it also works on the SecantusDB test server, whose
        ``$expr`` comparisons against ``$$NOW`` are wrong. Written timestamps still come from
        ``$$NOW`` in the update itself."""
        reply = self._db.command("hello", codec_options=self._codec)
        now = reply.get("localTime")
        if not isinstance(now, datetime):
            raise StoreDataError("localTime", f"the server's hello reply has no time: {now!r}")
        return now

    def _col(self, name: str) -> Collection[Doc]:
        return self._db[self._prefix + name]

    @property
    def _jobs(self) -> Collection[Doc]:
        return self._col("jobs")

    def _finish_one(self, query: Doc, update: list[Doc], succeeded: bool) -> bool:
        """A terminal update of one job, then the count of its batch (if it has one).

        Two single-document writes, not a transaction: the jobs collection is written by
        multi-document updates at the same time (heartbeats, recovery), and transactions on
        the hot path would conflict with them. A crash between the two writes loses that
        count; the workers' batch sweep repairs it with ``recount_batch``."""
        doc = self._jobs.find_one_and_update(
            query, update, projection={"batch_id": 1}, session=self._session
        )
        if doc is None:
            return False
        batch_id = doc.get("batch_id")
        if batch_id is not None:
            self._col("batches").update_one(
                {"_id": batch_id},
                {"$inc": {"succeeded" if succeeded else "failed": 1}},
                session=self._session,
            )
        return True

    def _atomic(self, fn: Callable[[ClientSession], T]) -> T:
        """Run ``fn`` in a multi-document transaction: the caller's, when this view is joined
        to a session that is in one, else a new one (``with_transaction`` retries transient
        transaction errors and unknown commit results)."""
        if self._session is not None:
            if self._session.in_transaction:
                return fn(self._session)
            return self._session.with_transaction(fn)
        with self._client.start_session() as session:
            return session.with_transaction(fn)


__all__ = [
    "NOW",
    "TERMINAL",
    "Doc",
    "MongoBase",
    "bson_value",
    "lit",
    "now_plus",
    "require_key",
    "require_non_negative",
    "require_uuid",
    "set_stage",
]
