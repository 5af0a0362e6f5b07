"""Mongo schema revision 0002 moves stored priorities from the four old levels to named
points of -100..100 (jobs, archive, recurring) and ``downgrade("0001")`` moves them back."""

from __future__ import annotations

import pytest

from ratchet_api.model import JobPriority
from ratchet_store_mongo import MongoJobStore

pytestmark = pytest.mark.mongo

OLD_TO_NEW = {0: JobPriority.LOW, 5: JobPriority.NORMAL, 10: JobPriority.HIGH, 15: 100}


def test_revision_0002_moves_old_levels_to_the_integer_range_and_back(mongo_url: str) -> None:
    store = MongoJobStore(mongo_url, collection_prefix="mig0002_")
    db = store.client.get_database(store.database_name)
    try:
        store.upgrade("0001")
        for name in ("jobs", "archive", "recurring"):
            db[f"mig0002_{name}"].insert_many(
                [{"_id": f"{name}-{old}", "priority": old} for old in OLD_TO_NEW]
            )

        store.upgrade()
        assert store.current_revision() == "0002"
        for name in ("jobs", "archive", "recurring"):
            moved = {d["_id"]: d for d in db[f"mig0002_{name}"].find()}
            for old, new in OLD_TO_NEW.items():
                assert moved[f"{name}-{old}"]["priority"] == new
                assert "_ratchet_0002" not in moved[f"{name}-{old}"]
        store.upgrade()  # a second run moves nothing again
        assert db["mig0002_jobs"].find_one({"_id": "jobs-5"})["priority"] == 0  # type: ignore[index]

        store.downgrade("0001")
        assert store.current_revision() == "0001"
        back = {d["_id"]: d["priority"] for d in db["mig0002_jobs"].find()}
        assert back == {f"jobs-{old}": old for old in OLD_TO_NEW}
    finally:
        store.downgrade("base")
        store.close()
