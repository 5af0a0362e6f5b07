"""Test servers: PostgreSQL, MariaDB and the Mongo wire-protocol server.

Each test session gets its own freshly created database on every server, so that concurrent
sessions (CI, several developers' runs) never share tables. On a developer's machine a server
that does not answer makes its tests skip with a reason naming the server; with ``CI=true`` a
missing server is a failure, never a skip.
"""

from __future__ import annotations

import os
import socket
import uuid

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

PG_HOST = os.environ.get("RATCHET_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("RATCHET_TEST_PG_PORT", "5432"))
MARIADB_HOST = os.environ.get("RATCHET_TEST_MARIADB_HOST", "127.0.0.1")
MARIADB_PORT = int(os.environ.get("RATCHET_TEST_MARIADB_PORT", "3306"))
MONGO_URL = os.environ.get("RATCHET_TEST_MONGO_URL", "mongodb://127.0.0.1:27017/?retryWrites=false")

SESSION_SUFFIX = uuid.uuid4().hex[:10]


def _fresh_name() -> str:
    """A database name unique to this session and this call (one database per test module)."""
    return f"ratchet_test_{SESSION_SUFFIX}_{uuid.uuid4().hex[:6]}"


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def unavailable(server: str, detail: str) -> None:
    """Skip (developer machine) or fail (CI) because ``server`` does not answer."""
    message = f"{server} is not available: {detail}"
    if IN_CI:
        pytest.fail(f"{message} (CI=true: every backend must be tested)", pytrace=False)
    pytest.skip(message)


def create_postgres_database() -> str:
    """Create a database for this session; return its SQLAlchemy URL."""
    if not port_open(PG_HOST, PG_PORT):
        unavailable("PostgreSQL", f"nothing answers on {PG_HOST}:{PG_PORT}")
    import psycopg

    name = _fresh_name()
    with psycopg.connect(
        host=PG_HOST, port=PG_PORT, user="postgres", dbname="postgres", autocommit=True
    ) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"postgresql+psycopg://postgres@{PG_HOST}:{PG_PORT}/{name}"


def drop_postgres_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(
        host=PG_HOST, port=PG_PORT, user="postgres", dbname="postgres", autocommit=True
    ) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def create_mariadb_database() -> str:
    if not port_open(MARIADB_HOST, MARIADB_PORT):
        unavailable("MariaDB", f"nothing answers on {MARIADB_HOST}:{MARIADB_PORT}")
    import pymysql

    name = _fresh_name()
    conn = pymysql.connect(host=MARIADB_HOST, port=MARIADB_PORT, user="root", password="")
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        conn.commit()
    finally:
        conn.close()
    return f"mysql+pymysql://root@{MARIADB_HOST}:{MARIADB_PORT}/{name}?charset=utf8mb4"


def drop_mariadb_database(url: str) -> None:
    import pymysql

    name = url.rsplit("/", 1)[1].split("?", 1)[0]
    conn = pymysql.connect(host=MARIADB_HOST, port=MARIADB_PORT, user="root", password="")
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        conn.commit()
    finally:
        conn.close()


def mongo_database_url() -> str:
    """A ``mongodb://`` URL naming a database unique to this session."""
    try:
        import pymongo
    except ImportError:
        unavailable("MongoDB", "pymongo is not installed")
    client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(
        MONGO_URL, serverSelectionTimeoutMS=3000
    )
    try:
        client.admin.command("ping")
    except Exception as exc:
        unavailable(
            "MongoDB (SecantusDB test server)",
            f"{MONGO_URL} does not answer a ping ({type(exc).__name__}); start it with "
            "`secantusd-py --host 127.0.0.1 --port 27017 --storage-path :memory:`",
        )
    finally:
        client.close()
    base, _, query = MONGO_URL.partition("?")
    base = base.rstrip("/")
    return f"{base}/{_fresh_name()}" + (f"?{query}" if query else "")


def drop_mongo_database(url: str) -> None:
    import pymongo

    client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(url)
    try:
        db = client.get_default_database()
        client.drop_database(db.name)
    finally:
        client.close()
