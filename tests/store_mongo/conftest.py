"""Fixtures of the Mongo store tests: one schema per session on the ``mongo_url`` database, and
an empty store for each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ratchet_store_mongo import COLLECTIONS, MongoJobStore

pytestmark = pytest.mark.mongo


def wipe(store: MongoJobStore) -> None:
    """Delete every document of every Ratchet collection (the schema document excepted)."""
    db = store.client.get_database(store.database_name)
    for spec in COLLECTIONS:
        if spec.name != "schema":
            db[f"ratchet_{spec.name}"].delete_many({})


@pytest.fixture(scope="module")
def mongo_schema(mongo_url: str) -> Iterator[str]:
    """The session database with the Ratchet schema upgraded (what ``ratchet db upgrade``
    does)."""
    store = MongoJobStore(mongo_url)
    store.upgrade()
    store.close()
    yield mongo_url


@pytest.fixture
def mongo_store(mongo_schema: str) -> Iterator[MongoJobStore]:
    store = MongoJobStore(mongo_schema)
    wipe(store)
    yield store
    wipe(store)
    store.close()
