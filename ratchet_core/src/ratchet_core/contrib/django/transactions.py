"""Enqueue inside Django's own transaction, and ``transaction.on_commit`` as the
``AfterCommitRegistrar``.

How the job joins the view's transaction: the job row is written on *Django's* database
connection. :func:`django_connection` wraps the calling thread's DBAPI connection of a
``DATABASES`` alias in a SQLAlchemy ``Connection`` (an engine whose ``creator`` hands out that
connection, ``NullPool``) and the SQL store joins it (``store.joined(connection)``). Django keeps
ownership: the wrapper turns SQLAlchemy's ``commit``/``rollback``/``close`` into no-ops, so
only Django's ``transaction.atomic`` decides. Result: a rollback of the view removes the job, a
commit makes it visible to workers in the same instant as the view's rows, and no job can be lost
between the two (there is no second transaction). Outside an atomic block the enqueue runs in its
own ``atomic`` block (Django's autocommit mode would otherwise commit statement by statement).

This needs the store to live in that Django database (the default: ``store.url`` derived from
``DATABASES``). With a store elsewhere (another URL, MongoDB), :func:`ratchet_core.contrib.django.enqueue`
falls back to ``transaction.on_commit(lambda: scheduler.enqueue(...))``: a rollback still
leaves no job, but a process that dies between Django's commit and the enqueue loses the job.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from django.db import connections, transaction
from sqlalchemy.pool import NullPool

from ratchet_api.spi.runtime import AfterCommitRegistrar, AfterCommitResult
from ratchet_core.contrib.django.conf import database_url

ALIAS_INFO_KEY = "ratchet.django_alias"
"""Key in ``sa.Connection.info`` naming the Django alias a borrowed connection belongs to."""


class _BorrowedDBAPIConnection:
    """Django's DBAPI connection as SQLAlchemy sees it. Transaction control and the connection's
    lifetime belong to Django: ``commit``, ``rollback`` and ``close`` do nothing here, and
    SQLAlchemy's per-connection setup (SQL functions, notice handlers) is not installed on
    Django's connection. Everything else is the real connection."""

    __slots__ = ("_raw",)

    def __init__(self, raw: Any) -> None:
        object.__setattr__(self, "_raw", raw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._raw, name, value)

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        return self._raw.cursor(*args, **kwargs)

    def commit(self) -> None:
        """Django commits (at the end of ``transaction.atomic``)."""

    def rollback(self) -> None:
        """Django rolls back (an exception leaving ``transaction.atomic``)."""

    def close(self) -> None:
        """Django closes its connections (end of request, ``CONN_MAX_AGE``)."""

    def create_function(self, *args: Any, **kwargs: Any) -> None:
        """Keep Django's own SQLite functions (SQLAlchemy would replace REGEXP)."""

    def add_notice_handler(self, *args: Any, **kwargs: Any) -> None:
        """Do not pile a handler onto Django's long-lived connection per enqueue."""


_engines: dict[tuple[str, str], sa.Engine] = {}
_engines_lock = threading.Lock()


def _raw_connection(alias: str) -> _BorrowedDBAPIConnection:
    wrapper = connections[alias]
    wrapper.ensure_connection()
    return _BorrowedDBAPIConnection(wrapper.connection)


def _engine_for(alias: str) -> sa.Engine:
    url = database_url(connections[alias].settings_dict, alias)
    key = (alias, url)
    with _engines_lock:
        engine = _engines.get(key)
        if engine is None:
            kwargs: dict[str, Any] = {}
            if sa.make_url(url).get_backend_name() == "postgresql":
                # hstore registration would inspect Django's connection with isinstance checks.
                kwargs["use_native_hstore"] = False
            engine = sa.create_engine(
                url, creator=lambda: _raw_connection(alias), poolclass=NullPool, **kwargs
            )
            _engines[key] = engine
        return engine


@contextmanager
def django_connection(using: str = "default") -> Iterator[sa.Connection]:
    """A SQLAlchemy ``Connection`` that executes on the calling thread's Django connection of
    ``using``, inside ``transaction.atomic(using=using)`` (joining the caller's atomic block as
    a savepoint, or starting one). Pass it as a store/scheduler ``transaction``. Not thread
    safe: use it in the thread that opened it, like Django's connection."""
    engine = _engine_for(using)
    with transaction.atomic(using=using), engine.connect() as connection:
        connection.info[ALIAS_INFO_KEY] = using
        yield connection


def borrowed_alias(handle: object) -> str | None:
    """The Django alias of a connection made by :func:`django_connection`, else None."""
    if isinstance(handle, sa.Connection):
        alias = handle.info.get(ALIAS_INFO_KEY)
        return alias if isinstance(alias, str) else None
    return None


class DjangoAfterCommitRegistrar:
    """``transaction.on_commit`` as the ``AfterCommitRegistrar``.

    For a handle made by :func:`django_connection`, or no handle at all (the ambient Django
    transaction of ``default_alias``), the action runs after Django commits the outermost atomic
    block of that alias; a transaction already marked for rollback drops it. Any other handle (a
    plain SQLAlchemy connection or session) goes to ``fallback``.
    """

    def __init__(
        self, fallback: AfterCommitRegistrar, default_alias: Callable[[], str] | str = "default"
    ) -> None:
        self._fallback = fallback
        self._default_alias = default_alias

    def _alias(self) -> str:
        alias = self._default_alias
        return alias() if callable(alias) else alias

    def register_after_commit(
        self, action: Callable[[], None], transaction: object | None = None
    ) -> AfterCommitResult:
        alias = borrowed_alias(transaction)
        if transaction is not None and alias is None:
            return self._fallback.register_after_commit(action, transaction)
        alias = alias or self._alias()
        wrapper = connections[alias]
        if not wrapper.in_atomic_block:
            return AfterCommitResult.NO_ACTIVE_TRANSACTION
        if wrapper.needs_rollback:
            return AfterCommitResult.ROLLBACK_ONLY
        try:
            _on_commit(action, alias)
        except Exception:  # noqa: BLE001 - the contract reports, never raises
            return AfterCommitResult.REGISTRATION_FAILED
        return AfterCommitResult.REGISTERED


def _on_commit(action: Callable[[], None], alias: str) -> None:
    # robust=True: a failing wake-up must not stop the application's other on_commit callbacks.
    transaction.on_commit(action, using=alias, robust=True)


__all__ = [
    "ALIAS_INFO_KEY",
    "DjangoAfterCommitRegistrar",
    "borrowed_alias",
    "django_connection",
]
