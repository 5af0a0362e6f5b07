"""SQLite (the standard library's ``sqlite3``): the clock read by the SQLite library,
``UPDATE ... RETURNING`` from SQLite 3.35, and every write transaction opened with
``BEGIN IMMEDIATE`` (the file's one write lock is taken before anything is read)."""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite as sqlite_dialect

from ratchet_api.errors import StoreError
from ratchet_api.store.entities import Completion, JobEntity
from ratchet_store_sql._base import SqlBase
from ratchet_store_sql._convert import JOB_FIELDS, job_values
from ratchet_store_sql._dialects.base import (
    UTC_TYPE,
    J,
    OnConflictForms,
    ReturningClaim,
    T,
    chunks,
    count_per_batch,
    duplicate_error,
    succeeded_values,
    tagged,
)
from ratchet_store_sql._engine import begin_immediate
from ratchet_store_sql._errors import translate
from ratchet_store_sql._types import UtcDateTime


@functools.cache
def _job_insert() -> str:
    columns = ", ".join(JOB_FIELDS)
    return f"INSERT INTO {J.name} ({columns}) VALUES ({', '.join('?' * len(JOB_FIELDS))})"


@functools.cache
def _has_json_functions() -> bool:
    """Whether this process's SQLite library has ``json_each`` (the batched writes read their
    rows from one JSON document)."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("SELECT count(*) FROM json_each('[1]')").fetchone()
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


class _Binder:
    """Job rows as sqlite3 parameter tuples: ``job_values`` (checked, in ``JOB_FIELDS``
    order) with each value converted as its column type's bind processor on this dialect
    does, without SQLAlchemy's per-row statement work. The datetimes (aware UTC, checked by
    ``job_values``) become naive UTC and the UUIDs their hex text directly, as
    ``UtcDateTime``'s and ``Uuid``'s processors would make them; any other processed column
    goes through its processor."""

    def __init__(self, dialect: sa.Dialect) -> None:
        processed = [
            (index, processor)
            for index, name in enumerate(JOB_FIELDS)
            if (processor := J.c[name].type.bind_processor(dialect)) is not None
        ]
        self._stamps = tuple(
            index for index, _ in processed if isinstance(J.c[JOB_FIELDS[index]].type, UtcDateTime)
        )
        self._uuids = tuple(
            index
            for index, _ in processed
            if isinstance(kind := J.c[JOB_FIELDS[index]].type, sa.Uuid) and kind.as_uuid
        )
        direct = {*self._stamps, *self._uuids}
        self._processed = [(i, processor) for i, processor in processed if i not in direct]

    def __call__(self, values: tuple[Any, ...]) -> tuple[Any, ...]:
        out = list(values)
        for index in self._stamps:
            stamp = out[index]
            if stamp is not None:
                out[index] = stamp.replace(tzinfo=None)
        for index in self._uuids:
            uuid = out[index]
            if uuid is not None:
                out[index] = uuid.hex
        for index, processor in self._processed:
            value = out[index]
            if value is not None:
                out[index] = processor(value)
        return tuple(out)


_NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now', '+0.000000 seconds') || '000'"
"""``SqliteDialect.now()`` as SQL text (SQLite reads ``'now'`` once per statement)."""
_SUCCEED_MANY = sa.text(
    f"UPDATE {J.name} SET status = 'SUCCEEDED', result = v.result, owner = NULL,"
    f" finished_at = {_NOW}, updated_at = {_NOW}"
    " FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS seq,"
    " json_extract(value, '$[2]') AS result FROM json_each(:rows)) AS v"
    # `+status`: no index on the status: the primary key is the way in
    f" WHERE {J.name}.id = v.id AND {J.name}.claim_seq = v.seq AND +{J.name}.status = 'RUNNING'"
    f" RETURNING {J.name}.id, {J.name}.batch_id"
).columns(sa.column("id", sa.Uuid()), sa.column("batch_id", sa.Uuid()))
"""The fenced successes of a chunk as ONE constant statement: the ``(id hex, claim sequence,
result)`` rows travel as one JSON array read by ``json_each``, so SQLAlchemy compiles it once
(the ``IN`` lists and ``CASE`` of the portable form were compiled again for every batch:
about a third of the completer's time in a 10,000-job run)."""

_TAG_INSERT = f"INSERT INTO {T.name} (job_id, tag) VALUES (?, ?)"
_KEY_EXISTS = f"SELECT 1 FROM {J.name} WHERE idempotency_key = ?"


class SqliteDialect(OnConflictForms, ReturningClaim):
    name = "sqlite"
    is_sqlite = True
    immediate_writes = True
    # without statistics SQLite reads the fair claim's keys and heads through the claim index
    # (equality on status) and filters 100,000 rows; the key-led index is the one to read
    fair_index_hint = "INDEXED BY ix_ratchet_jobs_fair_claim"

    def __init__(self, engine: sa.Engine, *, load_tags_on_claim: bool = True) -> None:
        super().__init__(engine, load_tags_on_claim=load_tags_on_claim)
        self._bind = _Binder(engine.dialect)
        self._tag_id = T.c.job_id.type.bind_processor(engine.dialect)
        self.returning = sqlite3.sqlite_version_info >= (3, 35)
        if not self.returning:
            raise StoreError(
                f"Ratchet needs SQLite 3.35 or later (UPDATE ... RETURNING); this Python has "
                f"SQLite {sqlite3.sqlite_version}"
            )
        if not _has_json_functions():
            raise StoreError(
                "Ratchet needs SQLite's JSON functions (json_each: built in from SQLite 3.38, "
                f"the JSON1 extension before); this Python's SQLite {sqlite3.sqlite_version} "
                "was built without them"
            )

    def now_plus(self, seconds: float) -> sa.ColumnElement[datetime]:
        # SQLite is embedded: "now" is read by the SQLite library in the statement itself
        # (the host's clock as the C library sees it, millisecond precision), never by the
        # application's Python clock. Every process on the host thus uses one time source
        # for leases, heartbeats and due times, as the server clock does elsewhere. The
        # text has the column format (YYYY-MM-DD HH:MM:SS.ffffff) so comparisons hold.
        modifier = f"{seconds:+.6f} seconds"
        expr = sa.func.strftime("%Y-%m-%d %H:%M:%f", "now", modifier).concat("000")
        return sa.type_coerce(expr, UTC_TYPE)

    def seconds_between(
        self, start: sa.ColumnElement[Any], end: sa.ColumnElement[Any]
    ) -> sa.ColumnElement[float]:
        expr = (sa.func.julianday(end) - sa.func.julianday(start)) * 86400.0
        return sa.type_coerce(expr, sa.Float())

    def conflict_insert(self, table: sa.Table) -> Any:
        return sqlite_dialect.insert(table)

    def claim_target(self, pick: sa.Select[Any]) -> sa.ColumnElement[bool]:
        # BEGIN IMMEDIATE already holds the write lock: no row locks to take
        return J.c.id.in_(pick.scalar_subquery())

    def dispatch_chunk(self, conn: sa.Connection, part: Sequence[tuple[UUID, int]]) -> set[UUID]:
        # the first mark of a claim stands (a repeated mark still reports the claim current)
        stamp = sa.func.coalesce(J.c.dispatched_at, self.now())
        stmt = (
            sa.update(J)
            .where(self.running_claims(part))
            .values(dispatched_at=stamp)
            .returning(J.c.id)
        )
        return set(conn.execute(stmt).scalars())

    def succeed_chunk(
        self, conn: sa.Connection, part: Sequence[Completion], now: sa.ColumnElement[datetime]
    ) -> set[UUID]:
        done: list[Any]
        if any(c.result is not None and "\x00" in c.result for c in part):
            # json_extract ends a text at an escaped NUL: bound values keep it whole
            fence = self.running_claims([(c.job_id, c.claim_seq) for c in part])
            values = succeeded_values(part, now)
            done = list(
                conn.execute(
                    sa.update(J).where(fence).values(**values).returning(J.c.id, J.c.batch_id)
                )
            )
        else:
            rows = json.dumps([(c.job_id.hex, c.claim_seq, c.result) for c in part])
            done = list(conn.execute(_SUCCEED_MANY, {"rows": rows}))
        per_batch = count_per_batch(done)
        if per_batch:
            SqlBase._count_batch_children(conn, per_batch)
        return {row[0] for row in done}

    def bulk_row(self, job: JobEntity) -> Any:
        return job_values(job)

    def insert_job(self, store: SqlBase, job: JobEntity) -> JobEntity:
        """One job in a ``BEGIN IMMEDIATE`` transaction sent straight on the pooled sqlite3
        connection: the same statements as the portable path, without SQLAlchemy's
        per-execution work (about as much client time as the statements themselves). A joined
        view, and a job whose idempotency key exists, take the portable path."""
        if store._bound is not None:
            return super().insert_job(store, job)
        params = self._bind(job_values(job))  # checked before anything is sent
        store._check_open("insert_job")
        try:
            raw = store._raw_connection()
        except sa.exc.SQLAlchemyError as exc:
            raise translate(exc, "insert_job") from exc
        sql = _job_insert()
        try:
            driver: sqlite3.Connection = raw.driver_connection
            try:
                begin_immediate(driver)
                if (
                    job.idempotency_key is not None
                    and driver.execute(_KEY_EXISTS, (job.idempotency_key,)).fetchone()
                ):
                    driver.execute("ROLLBACK")
                    raw.close()
                    raw = None
                    return super().insert_job(store, job)  # returns the stored job
                driver.execute(sql, params)
                if job.tags:
                    job_id = self._tag_id(job.id) if self._tag_id else job.id
                    driver.executemany(_TAG_INSERT, [(job_id, t) for t in sorted(set(job.tags))])
                driver.execute("COMMIT")
            except BaseException:
                if driver.in_transaction:
                    driver.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            error = sa.exc.DBAPIError.instance(sql, None, exc, sqlite3.Error)
            if isinstance(error, sa.exc.IntegrityError):
                raise duplicate_error(job, error) from exc
            raise translate(error, "insert_job") from exc
        finally:
            if raw is not None:
                raw.close()
        return tagged(job)

    def insert_rows(
        self, conn: sa.Connection, rows: list[Any], tag_rows: list[dict[str, Any]]
    ) -> None:
        # one executemany straight on sqlite3 (SQLAlchemy's per-row work was most of the time)
        bind = self._bind
        conn.exec_driver_sql(_job_insert(), [bind(values) for values in rows])
        for part in chunks(tag_rows, 2000):
            conn.execute(sa.insert(T), list(part))


__all__ = ["SqliteDialect"]
