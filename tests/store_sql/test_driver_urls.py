"""URLs without a driver (``postgresql://``, ``mysql://``, ``mariadb://``) and URLs naming a driver
that is not installed: the first work with the driver Ratchet's extras install, the second fail
with an error saying which URL to use instead."""

from __future__ import annotations

import importlib.util

import pytest

from ratchet_api.errors import StoreError
from ratchet_api.store import JobEntity
from ratchet_store_sql import SqlJobStore, create_store_engine, migrate


def _without_driver(url: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme.split('+', 1)[0]}://{rest}"


def _expected_driver(default_dbapi: str, dialect_driver: str, extra_driver: str) -> str:
    # SQLAlchemy's default DBAPI wins when it is installed (the URL then means what it says).
    return dialect_driver if importlib.util.find_spec(default_dbapi) else extra_driver


@pytest.mark.parametrize(
    ("fixture", "scheme", "default_dbapi", "dialect_driver", "extra_driver"),
    [
        ("postgres_url", "postgresql", "psycopg2", "psycopg2", "psycopg"),
        ("mariadb_url", "mysql", "MySQLdb", "mysqldb", "pymysql"),
        ("mariadb_url", "mariadb", "MySQLdb", "mysqldb", "pymysql"),
    ],
)
def test_url_without_driver_opens_a_working_store_with_the_extras_driver(
    request: pytest.FixtureRequest,
    fixture: str,
    scheme: str,
    default_dbapi: str,
    dialect_driver: str,
    extra_driver: str,
) -> None:
    server_url = str(request.getfixturevalue(fixture))
    url = f"{scheme}://{server_url.split('://', 1)[1]}"
    migrate(url)
    store = SqlJobStore(url)
    try:
        assert store.engine.dialect.driver == _expected_driver(
            default_dbapi, dialect_driver, extra_driver
        )
        job = store.insert_job(JobEntity(target="tests.jobs:noop"))
        found = store.find_by_id(job.id)
        assert found is not None and found.target == "tests.jobs:noop"
        assert store.delete_job(job.id)
    finally:
        store.close()


@pytest.mark.skipif(
    importlib.util.find_spec("MySQLdb") is not None,
    reason="mysqlclient (MySQLdb) is installed: a mysql+mysqldb:// URL works here",
)
def test_url_naming_mysqlclient_when_missing_says_to_use_mysql_pymysql() -> None:
    with pytest.raises(StoreError, match=r"No module named 'MySQLdb'.*use a mysql\+pymysql://"):
        create_store_engine("mysql+mysqldb://root@127.0.0.1/x")


@pytest.mark.skipif(
    importlib.util.find_spec("psycopg2") is not None,
    reason="psycopg2 is installed: a postgresql+psycopg2:// URL works here",
)
def test_url_naming_psycopg2_when_missing_says_to_use_postgresql_psycopg() -> None:
    with pytest.raises(
        StoreError, match=r"No module named 'psycopg2'.*use a postgresql\+psycopg://"
    ):
        create_store_engine("postgresql+psycopg2://postgres@127.0.0.1/x")
