"""The default ``AfterCommitRegistrar`` for SQLAlchemy connections and ORM sessions.

Wake-ups after an enqueue must not announce work that a rollback will remove, so the scheduler
hands them to this registrar with the caller's transaction handle:

* a SQLAlchemy ``Session`` in a transaction: the actions run from the session's
  ``after_commit`` event (after the database commit), in registration order; ``after_rollback``
  drops them;
* a SQLAlchemy ``Connection`` in a transaction: the connection's ``commit`` event fires just
  before the driver commits, so the actions are handed to a small background thread that runs
  them once the transaction has ended (bounded wait); ``rollback`` drops them;
* ``None``, an object without a transaction, or a connection/session not in a transaction:
  ``NO_ACTIVE_TRANSACTION`` (the caller runs the action now);
* anything else that reports an open transaction (a pymongo ``ClientSession`` in a transaction,
  which has no commit hooks): ``REGISTRATION_FAILED``; the caller skips the wake-up and polling
  finds the job.

Framework integrations (Django's ``transaction.on_commit``, Flask-SQLAlchemy) register their own
registrar as an alternative.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from loguru import logger

from ratchet_api.spi.runtime import AfterCommitResult

_COMMIT_WAIT_SECONDS = 2.0


def _run_all(actions: list[Callable[[], None]]) -> None:
    for action in actions:
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - one failing action must not stop the others
            logger.warning("after-commit action {!r} failed: {!r}", action, exc)


class DefaultAfterCommitRegistrar:
    """``AfterCommitRegistrar`` for SQLAlchemy ``Connection`` and ``Session`` handles. Thread
    safe; actions of one transaction run once, in registration order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: weakref.WeakKeyDictionary[Any, list[Callable[[], None]]] = (
            weakref.WeakKeyDictionary()
        )
        self._installed: weakref.WeakKeyDictionary[Any, None] = weakref.WeakKeyDictionary()
        self._executor: ThreadPoolExecutor | None = None

    def register_after_commit(
        self, action: Callable[[], None], transaction: object | None = None
    ) -> AfterCommitResult:
        if transaction is None:
            return AfterCommitResult.NO_ACTIVE_TRANSACTION
        try:
            from sqlalchemy.engine import Connection
            from sqlalchemy.orm import Session, scoped_session
        except ImportError:  # pragma: no cover - SQLAlchemy is not installed
            Connection = Session = scoped_session = None  # type: ignore[assignment,misc]
        if scoped_session is not None and isinstance(transaction, scoped_session):
            transaction = transaction()
        if Session is not None and isinstance(transaction, Session):
            return self._register_session(transaction, action)
        if Connection is not None and isinstance(transaction, Connection):
            return self._register_connection(transaction, action)
        in_tx = getattr(transaction, "in_transaction", None)
        active = in_tx() if callable(in_tx) else bool(in_tx)
        if not active:
            return AfterCommitResult.NO_ACTIVE_TRANSACTION
        return AfterCommitResult.REGISTRATION_FAILED

    # ------------------------------------------------------------ shared bookkeeping

    def _add(self, handle: Any, action: Callable[[], None], install: Callable[[], None]) -> None:
        """Queue ``action`` for ``handle``'s current transaction; the event listeners are
        installed once per handle (listeners cannot be removed while SQLAlchemy dispatches)."""
        with self._lock:
            self._pending.setdefault(handle, []).append(action)
            needs_install = handle not in self._installed
            if needs_install:
                self._installed[handle] = None
        if needs_install:
            install()

    def _take(self, handle: Any) -> list[Callable[[], None]] | None:
        with self._lock:
            return self._pending.pop(handle, None)

    # ------------------------------------------------------------ ORM sessions

    def _register_session(self, session: Any, action: Callable[[], None]) -> AfterCommitResult:
        from sqlalchemy import event

        if not session.in_transaction():
            return AfterCommitResult.NO_ACTIVE_TRANSACTION

        def install() -> None:
            def on_commit(committed: Any) -> None:
                actions = self._take(committed)
                if actions:
                    _run_all(actions)

            def on_rollback(rolled_back: Any) -> None:
                self._take(rolled_back)

            event.listen(session, "after_commit", on_commit)
            event.listen(session, "after_rollback", on_rollback)

        self._add(session, action, install)
        return AfterCommitResult.REGISTERED

    # ------------------------------------------------------------ Core connections

    def _register_connection(self, conn: Any, action: Callable[[], None]) -> AfterCommitResult:
        from sqlalchemy import event

        if not conn.in_transaction():
            return AfterCommitResult.NO_ACTIVE_TRANSACTION

        def install() -> None:
            def on_commit(committing: Any) -> None:
                actions = self._take(committing)
                if actions:
                    # the event fires before the driver commits: run once the transaction ended
                    transaction = committing.get_transaction()
                    self._background().submit(self._after_transaction, transaction, actions)

            def on_rollback(rolled_back: Any) -> None:
                self._take(rolled_back)

            event.listen(conn, "commit", on_commit)
            event.listen(conn, "rollback", on_rollback)

        self._add(conn, action, install)
        return AfterCommitResult.REGISTERED

    def _background(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="ratchet-after-commit"
                )
            return self._executor

    @staticmethod
    def _after_transaction(transaction: Any, actions: list[Callable[[], None]]) -> None:
        deadline = time.monotonic() + _COMMIT_WAIT_SECONDS
        while getattr(transaction, "is_active", False) and time.monotonic() < deadline:
            time.sleep(0.0005)
        _run_all(actions)

    def close(self) -> None:
        """Stop the background thread (pending actions still run). Idempotent."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)


__all__ = ["DefaultAfterCommitRegistrar"]
