"""The full TCK against ``MongoJobStore`` on the Mongo test server.

Report: ``pytest tests/store_mongo/test_tck_mongo.py --ratchet-tck-report docs/compatibility
--ratchet-tck-name mongodb``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import pytest

from ratchet_api.store.protocols import JobStore
from ratchet_store_mongo import MongoJobStore
from ratchet_tck import BaseStoreFixture, StoreFixture, StoreTransaction, contract_test_classes
from tests.store_mongo.conftest import wipe
from tests.store_mongo.factory import open_mongo_store

pytestmark = pytest.mark.mongo


class MongoTransaction:
    """An application's begun multi-document transaction on a session of the store's client."""

    def __init__(self, store: MongoJobStore) -> None:
        self._session = store.client.start_session()
        self._session.start_transaction()

    @property
    def handle(self) -> object:
        return self._session

    def commit(self) -> None:
        self._session.commit_transaction()
        self._session.end_session()

    def rollback(self) -> None:
        self._session.abort_transaction()
        self._session.end_session()


class MongoStoreFixture(BaseStoreFixture):
    def __init__(self, url: str, store: MongoJobStore) -> None:
        self._url = url
        self._store = store

    def store(self) -> JobStore:
        return self._store

    def cleanup_store(self) -> None:
        wipe(self._store)

    def store_factory(self) -> Callable[[], JobStore] | None:
        return functools.partial(open_mongo_store, self._url)

    def begin_transaction(self) -> StoreTransaction | None:
        return MongoTransaction(self._store)


@pytest.fixture
def tck_fixture(mongo_store: MongoJobStore, mongo_schema: str) -> Iterator[StoreFixture]:
    yield MongoStoreFixture(mongo_schema, mongo_store)


globals().update(contract_test_classes())
