"""Opening a Mongo store in another process (picklable: a module-level function)."""

from __future__ import annotations

from ratchet_api.store.protocols import JobStore
from ratchet_store_mongo import MongoJobStore


def open_mongo_store(url: str) -> JobStore:
    return MongoJobStore(url)
