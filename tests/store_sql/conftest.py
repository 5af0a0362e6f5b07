"""Fixtures of the SQL store tests: one migrated store per backend, emptied after each test.

The schema is migrated once per database (session); each test gets a fresh ``SqlJobStore`` and
the tables are emptied afterwards. SQLite uses one file per session (``sqlite_session_url``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from ratchet_store_sql import SqlJobStore, migrate
from ratchet_store_sql.schema import metadata
from tests.conftest import PGBOUNCER, SQL_BACKENDS

_MIGRATED: set[str] = set()


@pytest.fixture(scope="session")
def sqlite_session_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('store_sql') / 'ratchet.db'}"


def sql_backend_url(request: pytest.FixtureRequest, backend: str) -> str:
    """A migrated database URL for ``backend`` (sqlite: one file for the session)."""
    if backend == "sqlite":
        url = str(request.getfixturevalue("sqlite_session_url"))
    elif backend == "postgresql":
        url = str(request.getfixturevalue("postgres_url"))
    elif backend == PGBOUNCER:  # migrated through the pooler too
        url = str(request.getfixturevalue("pgbouncer_url"))
    else:
        url = str(request.getfixturevalue("mariadb_url"))
    if url not in _MIGRATED:
        migrate(url)
        _MIGRATED.add(url)
    return url


def empty_tables(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        for table in reversed(metadata.sorted_tables):
            conn.execute(table.delete())


def open_store(url: str) -> SqlJobStore:
    """Module-level (picklable) factory: the store of ``url`` in another process."""
    return SqlJobStore(url)


@pytest.fixture(params=SQL_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(request: pytest.FixtureRequest, backend: str) -> str:
    return sql_backend_url(request, backend)


def checked_out(engine: sa.Engine) -> int:
    """Connections of ``engine``'s pool not given back (a leak, at a test's end)."""
    return int(getattr(engine.pool, "checkedout", lambda: 0)())


@pytest.fixture
def store(db_url: str) -> Iterator[SqlJobStore]:
    store = SqlJobStore(db_url)
    try:
        yield store
    finally:
        # no connection may stay checked out: a leak would show up here
        leaked = checked_out(store.engine)
        empty_tables(store.engine)
        store.close()
        assert leaked == 0, f"{leaked} connection(s) left checked out"


@pytest.fixture
def store_opener(db_url: str) -> Callable[[], SqlJobStore]:
    import functools

    return functools.partial(open_store, db_url)


@pytest.fixture
def tmp_sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'fresh.db'}"
