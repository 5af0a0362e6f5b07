"""Translation of driver errors into Ratchet's store errors (at the store boundary)."""

from __future__ import annotations

import sqlalchemy as sa

from ratchet_api.errors import StoreDataError, StoreError, TransientStoreError

# PostgreSQL SQLSTATEs worth retrying: serialization failure, deadlock, lock not available,
# admin shutdown / crash / cannot connect now, and the whole connection-exception class 08.
_PG_TRANSIENT = {"40001", "40P01", "55P03", "57P01", "57P02", "57P03"}
_PG_CONFLICT = {"40001", "40P01", "55P03"}
# MySQL/MariaDB: deadlock, lock wait timeout, and lost/killed connections.
_MY_CONFLICT = {1213, 1205}
_MY_TRANSIENT = _MY_CONFLICT | {2003, 2006, 2013, 2055, 1927, 1053, 1040}
_MISSING_TABLE = ("no such table", "undefinedtable", "doesn't exist", "does not exist")


class ConflictError(TransientStoreError):
    """A deadlock, serialization failure or lock timeout: the transaction rolled back and can
    safely be retried."""


class ConnectionLostError(TransientStoreError):
    """The connection broke during the operation: whether a statement sent on it was applied
    is unknown (only an idempotent write may be retried blindly)."""


# Server-side disconnects: admin shutdown/termination (PostgreSQL 57P01-57P03, class 08),
# MySQL/MariaDB "server has gone away", "lost connection", "connection killed", shutdown.
_MY_LOST = {2006, 2013, 2055, 1927, 1053}


def _lost(code: object) -> bool:
    if isinstance(code, str):
        return code.startswith("08") or code in {"57P01", "57P02", "57P03"}
    return code in _MY_LOST


def _code(exc: sa.exc.DBAPIError) -> object:
    """MySQL/MariaDB's numeric error code (their SQLSTATE is often the generic HY000), else
    PostgreSQL's SQLSTATE."""
    orig = exc.orig
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int):
        return args[0]
    sqlstate = getattr(orig, "sqlstate", None)
    if sqlstate:
        return sqlstate
    return args[0] if args else None


def is_transient(exc: BaseException) -> bool:
    """The SQL store's declaration of which driver errors a retry may overcome (translated into
    ``TransientStoreError``): lost or refused connections, server shutdown, deadlocks,
    serialization failures, lock timeouts, a busy SQLite file."""
    return isinstance(exc, sa.exc.SQLAlchemyError) and isinstance(
        translate(exc, "-"), TransientStoreError
    )


def translate(exc: sa.exc.SQLAlchemyError, operation: str) -> StoreError:
    """The Ratchet error for a SQLAlchemy/driver error raised during ``operation``."""
    detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:300]
    if isinstance(exc, sa.exc.DBAPIError):
        code = _code(exc)
        if exc.connection_invalidated or _lost(code):
            return ConnectionLostError(f"{operation}: database connection lost ({detail})")
        if code in _PG_CONFLICT or code in _MY_CONFLICT:
            return ConflictError(f"{operation}: transaction conflict, retry ({detail})")
        if (
            code in _PG_TRANSIENT
            or code in _MY_TRANSIENT
            or (isinstance(code, str) and code.startswith("08"))
        ):
            return TransientStoreError(f"{operation}: database unavailable ({detail})")
        lowered = detail.lower()
        if any(marker in lowered for marker in _MISSING_TABLE) and "ratchet_" in lowered:
            return StoreError(
                f"{operation}: the Ratchet schema is missing or outdated ({detail}); "
                "run `ratchet db upgrade` or ratchet_store_sql.migrate(url)"
            )
        if "database is locked" in lowered or "database is busy" in lowered:
            return ConflictError(f"{operation}: SQLite database is locked, retry ({detail})")
        if isinstance(exc, sa.exc.DataError):
            return StoreDataError("value", f"{operation}: refused by the database ({detail})")
        if isinstance(exc, (sa.exc.OperationalError, sa.exc.InterfaceError)):
            return TransientStoreError(f"{operation}: {detail}")
    return StoreError(f"{operation}: {type(exc).__name__}: {detail}")


__all__ = ["ConflictError", "ConnectionLostError", "is_transient", "translate"]
