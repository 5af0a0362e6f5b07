"""Connection and transaction handling shared by every part of the store."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Concatenate, ParamSpec, TypeVar
from uuid import UUID

import sqlalchemy as sa

from ratchet_api.errors import RatchetError, StoreError
from ratchet_api.store.entities import JobEntity
from ratchet_store_sql import schema as s
from ratchet_store_sql._convert import row_to_job
from ratchet_store_sql._dialects.base import CHUNK, Dialect, chunks, tags_for
from ratchet_store_sql._engine import IMMEDIATE
from ratchet_store_sql._errors import ConflictError, translate
from ratchet_store_sql._requires_new import begin_requires_new

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S", bound="SqlBase")
CONFLICT_RETRIES = 4

CONNECT_RETRIES = 4
"""Attempts to open a connection (a failed connect sent nothing, so it is always safe to
retry): 0.05 s, 0.2 s and 0.8 s apart, about a second in all for a server restarting."""

_RETRYING = threading.local()


def retry_conflicts(
    method: Callable[Concatenate[S, P], R],
) -> Callable[Concatenate[S, P], R]:
    """Retry a whole store call after a deadlock/serialization failure (its transaction was
    rolled back, so nothing of it persisted), at most ``CONFLICT_RETRIES`` runs in all. Never
    inside a caller's transaction, and never nested: a decorated method called from inside
    another one's retry runs once (the outer call retries the whole).

    Only operations that no engine retry helper drives are decorated. The worker's own writes
    (claim, started marks, fenced completions/retries/releases, heartbeats, job touches) are
    not retried here: the worker's single retry helper retries every ``TransientStoreError``
    (``StoreError.retryable``) they raise, so one write is never multiplied by two layers.
    """

    @functools.wraps(method)
    def wrapper(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        if self._bound is not None or getattr(_RETRYING, "active", False):
            return method(self, *args, **kwargs)
        _RETRYING.active = True
        try:
            for attempt in range(CONFLICT_RETRIES):
                try:
                    return method(self, *args, **kwargs)
                except ConflictError:
                    if attempt == CONFLICT_RETRIES - 1:
                        raise
                    time.sleep(0.002 * (3**attempt))
        finally:
            _RETRYING.active = False
        raise AssertionError("unreachable")

    return wrapper


class SqlBase:
    """Holds the engine and, for a joined view, the caller's connection.

    ``_write`` (REQUIRED) joins the caller's connection or opens a transaction of its own;
    ``_independent`` (REQUIRES_NEW) always commits on its own connection; ``_read`` (SUPPORTS)
    joins the caller's connection or uses a short read transaction. All three translate driver
    errors into ``StoreError``/``TransientStoreError``.
    """

    _engine: sa.Engine
    _bound: sa.Connection | None
    _d: Dialect
    _closed: bool

    def _check_open(self, operation: str) -> None:
        if self._closed:
            raise StoreError(f"{operation}: the store is closed")

    @contextmanager
    def _translated(self, operation: str) -> Iterator[None]:
        """Check the store is open and translate driver errors raised inside the block."""
        self._check_open(operation)
        try:
            yield
        except RatchetError:
            raise
        except sa.exc.SQLAlchemyError as exc:
            raise translate(exc, operation) from exc

    def _connect(self) -> sa.Connection:
        """A pooled connection (pinged at checkout, see ``create_store_engine``); a connect
        that fails with a driver error is retried, because nothing was sent yet."""
        for attempt in range(CONNECT_RETRIES):
            try:
                return self._engine.connect()
            except (sa.exc.OperationalError, sa.exc.InterfaceError):
                if attempt == CONNECT_RETRIES - 1:
                    raise
                time.sleep(0.05 * 4**attempt)
        raise AssertionError("unreachable")

    def _raw_connection(self) -> Any:
        """Like ``_connect`` for a raw DBAPI connection from the pool."""
        for attempt in range(CONNECT_RETRIES):
            try:
                return self._engine.raw_connection()
            except (sa.exc.OperationalError, sa.exc.InterfaceError):
                if attempt == CONNECT_RETRIES - 1:
                    raise
                time.sleep(0.05 * 4**attempt)
        raise AssertionError("unreachable")

    @contextmanager
    def _write(self, operation: str) -> Iterator[sa.Connection]:
        if self._bound is None:
            with self._independent(operation) as conn:
                yield conn
            return
        with self._translated(operation):
            yield self._bound

    @contextmanager
    def _write_statement(self, operation: str) -> Iterator[sa.Connection]:
        """Like ``_write`` for a write that is ONE statement: where the dialect allows it
        (PostgreSQL) and outside a caller's transaction the statement runs in autocommit
        (atomic by itself, one round trip instead of BEGIN + statement + COMMIT). Other
        backends and joined views use ``_write``."""
        if self._bound is not None or not self._d.autocommit_statements:
            with self._write(operation) as conn:
                yield conn
            return
        with self._translated(operation), self._connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            yield conn

    @contextmanager
    def _independent(self, operation: str) -> Iterator[sa.Connection]:
        with self._translated(operation), self._connect() as conn:
            if self._d.immediate_writes:
                conn.execution_options(**{IMMEDIATE: True})
            # never the caller's transaction, even through a joined view (REQUIRES_NEW)
            with begin_requires_new(conn, self._bound, operation):
                yield conn

    @contextmanager
    def _read(self, operation: str) -> Iterator[sa.Connection]:
        with self._translated(operation):
            if self._bound is not None:
                yield self._bound
                return
            with self._connect() as conn:
                yield conn

    # ------------------------------------------------------------------ shared helpers

    @staticmethod
    def _tags_for(conn: sa.Connection, ids: Sequence[UUID]) -> dict[UUID, list[str]]:
        return tags_for(conn, ids)

    def _jobs_from_rows(
        self, conn: sa.Connection, rows: Sequence[sa.RowMapping], *, with_tags: bool = True
    ) -> list[JobEntity]:
        if not rows:
            return []
        tags = self._tags_for(conn, [r["id"] for r in rows]) if with_tags else {}
        return [row_to_job(r, tags.get(r["id"], ())) for r in rows]

    def _select_jobs(self, conn: sa.Connection, stmt: sa.Select[Any]) -> list[JobEntity]:
        return self._jobs_from_rows(conn, list(conn.execute(stmt).mappings()))

    def _find_one(self, conn: sa.Connection, where: sa.ColumnElement[bool]) -> JobEntity | None:
        found = self._select_jobs(conn, sa.select(s.jobs).where(where))
        return found[0] if found else None

    @staticmethod
    def _count_batch_child(conn: sa.Connection, job_id: UUID, succeeded: bool) -> None:
        """Count the job that just finished in its batch (nothing for a job without one), in
        the caller's unit of work: the BatchStore progress contract."""
        b = s.batches
        column = "succeeded" if succeeded else "failed"
        batch_of_job = sa.select(s.jobs.c.batch_id).where(s.jobs.c.id == job_id)
        conn.execute(
            sa.update(b)
            .where(b.c.id == batch_of_job.scalar_subquery())
            .values({column: b.c[column] + 1})
        )

    @staticmethod
    def _count_batch_children(conn: sa.Connection, per_batch: dict[UUID, int]) -> None:
        """Add succeeded children to their batches (``{batch_id: count}``)."""
        b = s.batches
        for batch_id, count in sorted(per_batch.items()):
            conn.execute(
                sa.update(b).where(b.c.id == batch_id).values(succeeded=b.c.succeeded + count)
            )


__all__ = ["CHUNK", "SqlBase", "chunks", "retry_conflicts"]
