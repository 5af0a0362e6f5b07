"""Queue statistics (``QueueStatsStore``): one aggregation over the active jobs (the ``claim``
index, which leads with ``status``) with the finished ones of the window added through the
``finished`` index (``$unionWith``), grouped once."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ratchet_api.errors import StoreDataError
from ratchet_api.model import JobPriority, JobStatus
from ratchet_api.store.queues import BAND_BOUNDS, QueueCounts, QueueStats, rows_from_counts
from ratchet_store_mongo._base import Doc, MongoBase
from ratchet_store_mongo.documents import to_bson_datetime
from ratchet_store_mongo.errors import translated


def _band() -> Doc:
    low, normal, high = BAND_BOUNDS
    return {
        "$switch": {
            "branches": [
                {"case": {"$lt": ["$priority", low]}, "then": int(JobPriority.LOW)},
                {"case": {"$lt": ["$priority", normal]}, "then": int(JobPriority.NORMAL)},
                {"case": {"$lt": ["$priority", high]}, "then": int(JobPriority.HIGH)},
            ],
            "default": int(JobPriority.CRITICAL),
        }
    }


def _count(condition: Doc) -> Doc:
    return {"$sum": {"$cond": [condition, 1, 0]}}


class MongoQueueStatsMixin(MongoBase):
    def queue_stats_pipeline(self, now: datetime, finished_since: datetime | None) -> list[Doc]:
        """The aggregation ``queue_stats`` runs at the server time ``now`` (for ``explain``):
        the active jobs through the ``claim`` index (``status`` ``$in``: one index range per
        status), the finished ones since the window added by one ``$unionWith`` per status
        through the ``finished`` index, then one ``$group``. (An ``$or`` of the clauses would need the
        planner's index union, which the SecantusDB test server does not do: it scanned the
        collection.)"""
        pending = {"$eq": ["$status", JobStatus.PENDING.value]}
        due = {"$and": [pending, {"$lte": ["$scheduled_at", now]}]}
        counted: Doc = {
            "pending": _count(pending),
            "due": _count(due),
            "oldest": {"$min": {"$cond": [due, "$scheduled_at", None]}},
            "running": _count({"$eq": ["$status", JobStatus.RUNNING.value]}),
        }
        pipeline: list[Doc] = [
            {"$match": {"status": {"$in": [JobStatus.PENDING.value, JobStatus.RUNNING.value]}}}
        ]
        if finished_since is not None:
            since = to_bson_datetime(finished_since, "finished_since")
            # one branch per status: equality and range, which every planner (the SecantusDB
            # test server too) turns into one range of the ``finished`` index
            for status in (JobStatus.SUCCEEDED, JobStatus.FAILED):
                match = {"status": status.value, "finished_at": {"$gte": since}}
                pipeline.append(
                    {"$unionWith": {"coll": self._jobs.name, "pipeline": [{"$match": match}]}}
                )
            counted["succeeded"] = _count({"$eq": ["$status", JobStatus.SUCCEEDED.value]})
            counted["failed"] = _count({"$eq": ["$status", JobStatus.FAILED.value]})
        pipeline.append(
            {
                "$group": {
                    "_id": {
                        "e": {"$ifNull": ["$execution_target", None]},
                        "t": "$target",
                        "b": _band(),
                    },
                    **counted,
                }
            }
        )
        return pipeline

    @translated("queue_stats")
    def queue_stats(self, finished_since: datetime | None = None) -> QueueStats:
        if finished_since is not None:
            to_bson_datetime(finished_since, "finished_since")  # refuses a naive value
        now = self._now()
        groups: dict[tuple[str | None, str, JobPriority], QueueCounts] = {}
        rows: Any = self._jobs.aggregate(
            self.queue_stats_pipeline(now, finished_since), session=self._session
        )
        for row in rows:
            key = row["_id"]
            try:
                band = JobPriority(int(key["b"]))
            except (TypeError, ValueError) as exc:
                raise StoreDataError("priority", f"not a priority band: {key['b']!r}") from exc
            groups[(key["e"], key["t"], band)] = QueueCounts(
                pending=int(row["pending"]),
                due=int(row["due"]),
                oldest_due_at=row["oldest"],
                running=int(row["running"]),
                succeeded=int(row.get("succeeded", 0)),
                failed=int(row.get("failed", 0)),
            )
        return QueueStats(
            now=now, rows=rows_from_counts(groups.items()), finished_since=finished_since
        )


__all__ = ["MongoQueueStatsMixin"]
