"""The transaction of a REQUIRES_NEW write (lock, unlock, renew, heartbeat, node deletion).

Such a write always runs in a transaction of its own connection, so it commits on its own even
when it is called through a view joined to a caller's transaction (``SqlJobStore.joined``).

SQLite allows one writer per database file. When the caller of a joined view holds an open
transaction on the file and has written in it, it holds that write lock, and it cannot release
it before this write returns: waiting (the busy timeout) could only end, after the whole
timeout, in a ``ConflictError``. So while the caller's transaction is open the write takes the
lock without waiting, and when the lock is held it raises ``StoreError`` at once, naming the
cause, having written nothing. A caller's transaction that has only read (or not yet done
anything) holds no write lock in WAL mode, and the write commits on its own as on the other
databases.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from ratchet_api.errors import StoreError


def _raw(conn: sa.Connection) -> Any:
    return conn.connection.dbapi_connection


def _caller_in_transaction(bound: sa.Connection) -> bool:
    try:
        return bool(getattr(_raw(bound), "in_transaction", False))
    except sa.exc.SQLAlchemyError:  # a closed or invalidated caller connection
        return False


@contextmanager
def begin_requires_new(
    conn: sa.Connection, bound: sa.Connection | None, operation: str
) -> Iterator[None]:
    """Begin, and commit on exit (roll back on an error), the REQUIRES_NEW transaction of
    ``conn``; ``bound`` is the caller's connection of a joined view (None outside one)."""
    if bound is None or conn.dialect.name != "sqlite" or not _caller_in_transaction(bound):
        with conn.begin():
            yield
        return
    raw = _raw(conn)
    (previous,) = raw.execute("PRAGMA busy_timeout").fetchone()
    raw.execute("PRAGMA busy_timeout=0")
    try:
        transaction = conn.begin()
    except sa.exc.OperationalError as exc:
        if "locked" not in str(exc) and "busy" not in str(exc):
            raise
        raise StoreError(
            f"{operation} is REQUIRES_NEW (it commits on its own connection), but the caller's "
            "transaction this view is joined to holds the SQLite database's only write lock, "
            "which it keeps until it ends: call it before the transaction writes or after it "
            "ends (nothing was written)"
        ) from exc
    finally:
        raw.execute(f"PRAGMA busy_timeout={int(previous)}")
    with transaction:
        yield


__all__ = ["begin_requires_new"]
