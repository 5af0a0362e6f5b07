"""Flow control: deferred claims and cluster-wide rate limits (token buckets)."""

from __future__ import annotations

from datetime import datetime, timedelta
from uuid import UUID

from pymongo.errors import DuplicateKeyError

from ratchet_api.errors import StoreDataError, TransientStoreError
from ratchet_api.model import JobStatus
from ratchet_store_mongo._base import MongoBase, require_key, set_stage
from ratchet_store_mongo.documents import to_bson_datetime
from ratchet_store_mongo.errors import translated

_CAS_TRIES = 50


class MongoFlowControlMixin(MongoBase):
    @translated("defer_claim")
    def defer_claim(self, job_id: UUID, claim_seq: int, run_at: datetime) -> bool:
        from ratchet_store_mongo._jobs import fenced

        result = self._jobs.update_one(
            fenced(job_id, claim_seq),
            set_stage(
                {
                    "status": JobStatus.PENDING,
                    "scheduled_at": to_bson_datetime(run_at, "run_at"),
                    "owner": None,
                    "started_at": None,
                    "heartbeat_at": None,
                },
                now=("updated_at",),
                attempt={"$max": [0, {"$subtract": ["$attempt", 1]}]},
            ),
            session=self._session,
        )
        return result.modified_count == 1

    @translated("acquire_rate")
    def acquire_rate(self, key: str, limit: int, per: timedelta) -> timedelta:
        require_key(key, "key")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise StoreDataError("limit", f"must be a positive integer, got {limit!r}")
        if not isinstance(per, timedelta) or per <= timedelta(0):
            raise StoreDataError("per", f"must be a positive timedelta, got {per!r}")
        rate = limit / per.total_seconds()
        buckets = self._col("rate_limits")
        # optimistic concurrency: read the bucket, compute on the server's clock, write it back
        # only if nobody changed it meanwhile (version ``v``)
        for _ in range(_CAS_TRIES):
            now = self._now()
            doc = buckets.find_one({"_id": key}, session=self._session)
            if doc is None:
                try:
                    buckets.insert_one(
                        {"_id": key, "tokens": float(limit) - 1.0, "refreshed_at": now, "v": 0},
                        session=self._session,
                    )
                except DuplicateKeyError:
                    continue
                return timedelta(0)
            # never move the bucket's clock back (a time read before a racer's write)
            now = max(now, doc["refreshed_at"])
            elapsed = (now - doc["refreshed_at"]).total_seconds()
            tokens = min(float(limit), float(doc["tokens"]) + elapsed * rate)
            if tokens < 1.0:
                return timedelta(seconds=(1.0 - tokens) / rate)
            written = buckets.update_one(
                {"_id": key, "v": doc["v"]},
                {"$set": {"tokens": tokens - 1.0, "refreshed_at": now}, "$inc": {"v": 1}},
                session=self._session,
            )
            if written.modified_count == 1:
                return timedelta(0)
        raise TransientStoreError(f"acquire_rate: bucket {key!r} kept changing concurrently")


__all__ = ["MongoFlowControlMixin"]
