"""The Mongo store's queue statistics read through indexes: the active jobs through ``claim``
(status ``$in``) and the finished jobs of the window through ``finished``, as the server plans
them (``explain``)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from ratchet_api.model import JobStatus
from ratchet_api.store import JobEntity
from ratchet_store_mongo import MongoJobStore


def _plan(store: MongoJobStore, command: dict[str, Any]) -> str:
    return json.dumps(store._db.command("explain", command, verbosity="queryPlanner"), default=str)


def test_queue_stats_reads_the_status_indexes(mongo_store: MongoJobStore) -> None:
    now = mongo_store.server_now()
    mongo_store.bulk_insert(
        [JobEntity(scheduled_at=now) for _ in range(50)]
        + [
            JobEntity(scheduled_at=now, status=JobStatus.SUCCEEDED, finished_at=now)
            for _ in range(200)
        ]
    )
    pipeline = mongo_store.queue_stats_pipeline(now, now - timedelta(hours=1))
    name = mongo_store._jobs.name
    whole = _plan(mongo_store, {"aggregate": name, "pipeline": pipeline, "cursor": {}})
    assert '"indexName": "claim"' in whole and "COLLSCAN" not in whole, whole
    unions = [stage["$unionWith"] for stage in pipeline if "$unionWith" in stage]
    assert len(unions) == 2  # SUCCEEDED, FAILED
    for union in unions:
        finished = _plan(mongo_store, {"find": name, "filter": union["pipeline"][0]["$match"]})
        assert '"indexName": "finished"' in finished and "COLLSCAN" not in finished, finished
    stats = mongo_store.queue_stats(now - timedelta(hours=1)).total()
    assert (stats.pending, stats.succeeded) == (50, 200)
