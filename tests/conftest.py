"""Shared fixtures: one fresh database per server per test module (see ``tests/servers.py``),
so that jobs one module leaves behind can never be claimed by another module's worker.

``store_url`` is parametrized over every backend (ids: sqlite, postgresql, mariadb, mongodb) so a
test written once runs against each store; backend-specific URLs are available as
``postgres_url``, ``mariadb_url``, ``mongo_url`` and ``sqlite_url``; ``pgbouncer_url`` is the
PostgreSQL database through PgBouncer (backend id ``pgbouncer``, added where a test module asks).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import servers

ALL_BACKENDS = ["sqlite", "postgresql", "mariadb", "mongodb"]
SQL_BACKENDS = ["sqlite", "postgresql", "mariadb"]


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    url = servers.create_postgres_database()
    yield url
    servers.drop_postgres_database(url)


@pytest.fixture(scope="module")
def mariadb_url() -> Iterator[str]:
    url = servers.create_mariadb_database()
    yield url
    servers.drop_mariadb_database(url)


PGBOUNCER = "pgbouncer"
"""Backend id of PostgreSQL through the session's transaction-pooling PgBouncer (the module's
PostgreSQL database, its URL with ``ratchet_pooler=transaction``): added to the parameters of
the fixtures whose tests must also pass behind a pooler (SQL TCK, chosen engine tests)."""


@pytest.fixture(scope="module")
def pgbouncer_url(postgres_url: str) -> Iterator[str]:
    """The module's PostgreSQL database through PgBouncer (transaction pooling)."""
    yield servers.pgbouncer_url(postgres_url)


@pytest.fixture(scope="session")
def mongo_server() -> Iterator[str]:
    """The Mongo server URL of the session; a SecantusDB server started here is stopped at the
    end of the session."""
    yield servers.mongo_server_url()
    servers.SECANTUS.stop()


@pytest.fixture(scope="module")
def mongo_url(mongo_server: str) -> Iterator[str]:
    url = servers.mongo_database_url()
    yield url
    servers.drop_mongo_database(url)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ratchet.db'}"


def backend_url(request: pytest.FixtureRequest, backend: str) -> str:
    if backend == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    if backend == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    if backend == "mariadb":
        return str(request.getfixturevalue("mariadb_url"))
    if backend == "mongodb":
        return str(request.getfixturevalue("mongo_url"))
    if backend == PGBOUNCER:
        return str(request.getfixturevalue("pgbouncer_url"))
    raise ValueError(backend)


@pytest.fixture(params=ALL_BACKENDS)
def store_url(request: pytest.FixtureRequest) -> str:
    """A URL for every backend in turn (the engine's parametrized store fixture)."""
    return backend_url(request, request.param)


@pytest.fixture(params=SQL_BACKENDS)
def sql_store_url(request: pytest.FixtureRequest) -> str:
    return backend_url(request, request.param)
