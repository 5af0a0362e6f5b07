"""Engine creation and the SQLite connection setup (WAL, busy timeout, BEGIN IMMEDIATE)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from ratchet_api.errors import StoreError

SQLITE_BUSY_TIMEOUT_MS = 10_000
IMMEDIATE = "ratchet_sqlite_immediate"
"""Execution option: the transaction of this connection starts with ``BEGIN IMMEDIATE``."""

_HOOKED = "_ratchet_sqlite_hooked"


def create_store_engine(
    url: str | sa.URL,
    *,
    pool_size: int | None = None,
    busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS,
    **engine_kwargs: Any,
) -> sa.Engine:
    """An engine for ``url`` set up for Ratchet (SQLite: WAL, busy timeout, explicit BEGIN)."""
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise StoreError(f"invalid database URL {url!r}: {exc}") from exc
    kwargs: dict[str, Any] = dict(engine_kwargs)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if pool_size is not None:
            kwargs.setdefault("pool_size", pool_size)
    else:
        kwargs.setdefault("pool_size", pool_size or 10)
        kwargs.setdefault("max_overflow", 10)
        kwargs.setdefault("pool_recycle", 3600)
    if backend in ("mysql", "mariadb"):
        # InnoDB's REPEATABLE READ takes gap locks that make claimers and completers deadlock;
        # every statement of the store is written for READ COMMITTED.
        kwargs.setdefault("isolation_level", "READ COMMITTED")
    try:
        engine = sa.create_engine(parsed, **kwargs)
    except (ImportError, sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as exc:
        extra = {"postgresql": "postgresql", "mysql": "mysql", "mariadb": "mysql"}.get(backend)
        hint = f" (install ratchet-store-sql[{extra}])" if extra else ""
        raise StoreError(f"cannot create an engine for {parsed!r}: {exc}{hint}") from exc
    if backend == "sqlite":
        configure_sqlite(engine, busy_timeout_ms=busy_timeout_ms)
    return engine


def configure_sqlite(engine: sa.Engine, *, busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS) -> None:
    """Install the connection hooks on a SQLite engine (idempotent).

    pysqlite's own transaction handling is switched off so that SQLAlchemy's ``begin`` emits the
    ``BEGIN``: a write transaction of the store emits ``BEGIN IMMEDIATE`` and so takes the write
    lock before it reads (two processes can never claim the same job), and SAVEPOINTs work.
    """
    if getattr(engine, _HOOKED, False):
        return
    setattr(engine, _HOOKED, True)
    memory = engine.url.database in (None, "", ":memory:")

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            if not memory:
                cursor.execute("PRAGMA journal_mode=WAL")
                cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            cursor.execute("PRAGMA foreign_keys=ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        if conn.get_execution_options().get(IMMEDIATE):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")


__all__ = ["IMMEDIATE", "SQLITE_BUSY_TIMEOUT_MS", "configure_sqlite", "create_store_engine"]
