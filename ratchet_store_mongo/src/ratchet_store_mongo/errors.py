"""Translation of pymongo errors into Ratchet's store errors."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from pymongo.errors import (
    ConnectionFailure,
    DuplicateKeyError,
    OperationFailure,
    PyMongoError,
    ServerSelectionTimeoutError,
)

from ratchet_api.errors import RatchetError, StoreError, TransientStoreError

P = ParamSpec("P")
R = TypeVar("R")

TRANSIENT_CODES = frozenset(
    {
        6,  # HostUnreachable
        7,  # HostNotFound
        89,  # NetworkTimeout
        91,  # ShutdownInProgress
        112,  # WriteConflict
        189,  # PrimarySteppedDown
        262,  # ExceededTimeLimit
        9001,  # SocketException
        10107,  # NotWritablePrimary
        11600,  # InterruptedAtShutdown
        11602,  # InterruptedDueToReplStateChange
        13435,  # NotPrimaryNoSecondaryOk
        13436,  # NotPrimaryOrSecondary
    }
)
"""Server error codes that a retry may overcome (failover, conflicts, network)."""

ILLEGAL_OPERATION = 20

TRANSIENT_LABELS = ("TransientTransactionError", "RetryableWriteError")


def is_transient(exc: PyMongoError) -> bool:
    """True for failures that retrying may overcome: network errors, primary stepdown (pymongo's
    ``NotPrimaryError`` is a ``ConnectionFailure``), write conflicts and errors labelled
    ``TransientTransactionError``/``RetryableWriteError``."""
    if isinstance(exc, (ConnectionFailure, ServerSelectionTimeoutError)):
        return True
    if any(exc.has_error_label(label) for label in TRANSIENT_LABELS):
        return True
    return isinstance(exc, OperationFailure) and exc.code in TRANSIENT_CODES


def translate(exc: PyMongoError, operation: str) -> StoreError:
    """The Ratchet error for a driver error raised by ``operation``."""
    message = f"MongoDB {operation} failed: {type(exc).__name__}: {exc}"
    if is_transient(exc):
        return TransientStoreError(message + " (transient: retrying may succeed)")
    if (
        isinstance(exc, OperationFailure)
        and exc.code == ILLEGAL_OPERATION
        and ("replica set" in str(exc) or "Transaction" in str(exc))
    ):
        return StoreError(
            message + " (multi-document transactions need a replica set: run MongoDB as a "
            "replica set, a single member is enough; see docs/stores/mongodb.md)"
        )
    return StoreError(message)


def translated(operation: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a store method so that driver errors leave it as ``StoreError``s."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return fn(*args, **kwargs)
            except RatchetError:
                raise
            except PyMongoError as exc:
                raise translate(exc, operation) from exc

        return wrapper

    return decorate


def duplicate_key_index(exc: DuplicateKeyError) -> str | None:
    """The name of the key a duplicate key error is about (``_id``, ``idempotency_key``...)."""
    details = exc.details or {}
    pattern = details.get("keyPattern")
    if isinstance(pattern, dict) and pattern:
        return str(next(iter(pattern)))
    message = str(details.get("errmsg", exc))
    for key in ("idempotency_key", "_id"):
        if key in message:
            return key
    return None


__all__ = ["TRANSIENT_CODES", "duplicate_key_index", "is_transient", "translate", "translated"]
