"""``SqlJobStore``: the SQL implementation of the Ratchet store SPI."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, TypeVar, cast

import sqlalchemy as sa

from ratchet_api.errors import StoreError
from ratchet_api.store import JobStore, SchemaManager
from ratchet_api.store.versions import STORE_SPI
from ratchet_store_sql._capabilities import (
    AnalyticsOperations,
    ArchiveOperations,
    AuditOperations,
    BatchOperations,
    ExtensionOperations,
    FlowControlOperations,
    HistoryOperations,
    LockOperations,
    PermitOperations,
    QueryOperations,
    QueueStatsOperations,
    RecurringOperations,
    SignalOperations,
    WorkerBatchOperations,
    WorkflowOperations,
)
from ratchet_store_sql._dialects import dialect_for
from ratchet_store_sql._engine import (
    SQLITE_BUSY_TIMEOUT_MS,
    configure_sqlite,
    create_store_engine,
)
from ratchet_store_sql._engine import (
    history_partition as history_partition_of,
)
from ratchet_store_sql._errors import is_transient
from ratchet_store_sql._jobs import JobOperations
from ratchet_store_sql._sealed import SealedArchiveOperations, SealedValueOperations
from ratchet_store_sql.migration import SqlSchemaManager

C = TypeVar("C")


class SqlJobStore(
    JobOperations,
    RecurringOperations,
    BatchOperations,
    WorkflowOperations,
    SignalOperations,
    PermitOperations,
    FlowControlOperations,
    LockOperations,
    ArchiveOperations,
    HistoryOperations,
    QueryOperations,
    AnalyticsOperations,
    QueueStatsOperations,
    WorkerBatchOperations,
    AuditOperations,
    ExtensionOperations,
    SealedValueOperations,
    SealedArchiveOperations,
):
    """The Ratchet store on SQLite, PostgreSQL (psycopg 3) or MySQL/MariaDB (pymysql).

    ``url_or_engine`` is a SQLAlchemy URL (``sqlite:///ratchet.db``,
    ``postgresql+psycopg://user@host/db``, ``mysql+pymysql://user@host/db``) or an application's
    existing ``Engine`` (which the store then never disposes). Implements every mandatory
    sub-protocol of ``JobStore`` and every optional capability, plus ``SchemaManager``
    (Alembic migrations shipped in the package). ``create_schema=True`` runs the migrations at
    construction, for development; production runs ``ratchet db upgrade``.
    ``history_partition`` (``hour``, ``day`` or ``week``; default ``day``, or the URL option
    ``ratchet_history_partition``) is the width of PostgreSQL's history partitions, which
    retention drops whole (docs/stores/postgresql.md).

    Thread safe: one instance serves every thread of a process (a connection pool underneath).
    """

    ratchet_store_spi = STORE_SPI
    """The store SPI version this store implements (``ratchet_api.store.versions``)."""

    def __init__(
        self,
        url_or_engine: str | sa.URL | sa.Engine,
        *,
        pool_size: int | None = None,
        create_schema: bool = False,
        load_tags_on_claim: bool = True,
        sqlite_busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS,
        engine_options: dict[str, Any] | None = None,
        history_partition: str | None = None,
    ) -> None:
        if isinstance(url_or_engine, sa.Engine):
            self._engine = url_or_engine
            self._owns_engine = False
            if url_or_engine.dialect.name == "sqlite":
                configure_sqlite(url_or_engine, busy_timeout_ms=sqlite_busy_timeout_ms)
        elif isinstance(url_or_engine, (str, sa.URL)):
            self._engine = create_store_engine(
                url_or_engine,
                pool_size=pool_size,
                busy_timeout_ms=sqlite_busy_timeout_ms,
                **(engine_options or {}),
            )
            self._owns_engine = True
        else:
            raise StoreError(
                f"SqlJobStore needs a database URL or a SQLAlchemy Engine, "
                f"got {type(url_or_engine).__name__}"
            )
        self._bound = None
        # the backend's statements, chosen once: only its own module is imported
        self._d = dialect_for(self._engine, load_tags_on_claim=load_tags_on_claim)
        self._closed = False
        width = history_partition or history_partition_of(self._engine)
        if width is not None:
            self._set_history_partition(width)
        self._schema = SqlSchemaManager(self._engine)
        if create_schema:
            self._schema.upgrade()

    @property
    def engine(self) -> sa.Engine:
        """The SQLAlchemy engine the store runs on."""
        return self._engine

    @property
    def schema(self) -> SqlSchemaManager:
        """The migration manager of this store's database."""
        return self._schema

    def is_transient(self, exc: BaseException) -> bool:
        """Whether a retry of the call that raised ``exc`` may succeed: this store's
        declaration of its transient errors, read by the engine's one retry helper
        (``ratchet_core.worker.store_retry.transient_predicate``).

        True for a ``StoreError`` whose ``retryable`` is set (``TransientStoreError``: a lost
        or refused connection, a server shutting down, a deadlock, a serialization failure, a
        lock timeout, a busy SQLite file) and for the same driver errors not yet translated.
        False for everything else: duplicates, bad values, a missing schema, a closed store,
        programming errors. A retry after a lost connection is the caller's to judge (the
        statement may have committed); the engine's fenced writes are safe to send again."""
        if isinstance(exc, StoreError):
            return exc.retryable
        return is_transient(exc)

    def capability(self, kind: Callable[..., C]) -> C | None:
        if kind is SchemaManager:
            return self._schema  # type: ignore[return-value]
        return cast(C, self) if isinstance(self, cast(type, kind)) else None

    def joined(self, transaction: object) -> JobStore:
        """A view running REQUIRED mutations and SUPPORTS reads in the caller's transaction.

        ``transaction`` is a SQLAlchemy ``Connection`` (in a transaction or about to begin one)
        or an ORM ``Session``/``scoped_session`` (its current connection is used). The caller
        commits or rolls back; lock, heartbeat and node deletions still commit on their own.
        A failing statement inside the caller's transaction leaves it for the caller to roll
        back, as with any of its own statements.
        """
        conn = _connection_of(transaction)
        if conn.engine.dialect.name != self._engine.dialect.name:
            raise StoreError(
                f"cannot join a {conn.engine.dialect.name} connection from a "
                f"{self._engine.dialect.name} store"
            )
        view = copy.copy(self)
        view._bound = conn
        view._owns_engine = False
        return view

    def close(self) -> None:
        """Release the pool (only of an engine the store created). Idempotent; every later
        call raises ``StoreError``."""
        if self._closed:
            return
        if self._bound is None:
            self._closed = True
            self._d.close()
            if self._owns_engine:
                self._engine.dispose()

    def __repr__(self) -> str:
        joined = " joined" if self._bound is not None else ""
        return f"SqlJobStore({self._engine.url.render_as_string(hide_password=True)!r}{joined})"


def _connection_of(transaction: object) -> sa.Connection:
    if isinstance(transaction, sa.Connection):
        if transaction.closed:
            raise StoreError("cannot join a closed SQLAlchemy Connection")
        return transaction
    from sqlalchemy import orm

    if isinstance(transaction, (orm.Session, orm.scoped_session)):
        return transaction.connection()
    raise StoreError(
        "SqlJobStore.joined needs a SQLAlchemy Connection or ORM Session, "
        f"got {type(transaction).__name__}"
    )


__all__ = ["SqlJobStore"]
