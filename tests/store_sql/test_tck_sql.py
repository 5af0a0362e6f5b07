"""Certifies ``SqlJobStore`` with the whole Ratchet TCK on SQLite, PostgreSQL, MariaDB and
PostgreSQL behind a transaction-pooling PgBouncer (``pgbouncer``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa

from ratchet_api.store import JobStore
from ratchet_store_sql import SqlJobStore
from ratchet_tck import BaseStoreFixture, StoreFixture, StoreTransaction, contract_test_classes
from tests.conftest import PGBOUNCER, SQL_BACKENDS
from tests.store_sql.conftest import checked_out, empty_tables, open_store, sql_backend_url


class SqlTransaction:
    """An application's begun transaction on its own connection."""

    def __init__(self, engine: sa.Engine) -> None:
        self._connection = engine.connect()
        self._connection.begin()

    @property
    def handle(self) -> object:
        return self._connection

    def commit(self) -> None:
        self._connection.commit()
        self._connection.close()

    def rollback(self) -> None:
        self._connection.rollback()
        self._connection.close()


class SqlStoreFixture(BaseStoreFixture):
    def __init__(self, url: str) -> None:
        self.url = url
        self._store = SqlJobStore(url)

    def store(self) -> JobStore:
        return self._store

    def cleanup_store(self) -> None:
        empty_tables(self._store.engine)

    def store_factory(self) -> Callable[[], JobStore] | None:
        return functools.partial(open_store, self.url)

    @property
    def engine(self) -> sa.Engine:
        return self._store.engine

    def begin_transaction(self) -> StoreTransaction | None:
        return SqlTransaction(self._store.engine)

    def close(self) -> None:
        self._store.close()


@pytest.fixture(params=[*SQL_BACKENDS, PGBOUNCER])
def tck_fixture(request: pytest.FixtureRequest) -> Iterator[StoreFixture]:
    fixture = SqlStoreFixture(sql_backend_url(request, request.param))
    fixture.cleanup_store()
    try:
        yield fixture
        leaked = checked_out(fixture.engine)
        assert leaked == 0, f"the contract left {leaked} connection(s) checked out"
    finally:
        fixture.cleanup_store()
        fixture.close()


globals().update(contract_test_classes())
