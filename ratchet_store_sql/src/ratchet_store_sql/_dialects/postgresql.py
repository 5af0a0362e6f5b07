"""PostgreSQL: the claim with ``FOR UPDATE SKIP LOCKED`` and its tags in one statement, and
every hot write as ONE statement whatever the batch size (the rows travel as one JSON
document read back with ``json_array_elements``), run in autocommit: one round trip each.

``PostgresDialect`` runs them through SQLAlchemy (any PostgreSQL driver); ``PsycopgDialect``
(psycopg 3, Ratchet's extra) sends the single-statement ones straight on the pooled driver
connection, prepared by the driver, and bulk inserts with COPY.
"""

from __future__ import annotations

import functools
import json
import logging
import operator
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from ratchet_api.errors import DuplicateJobError
from ratchet_api.model import JobStatus, NodeTagFilter
from ratchet_api.store.entities import (
    Completion,
    ExecutionRecord,
    FailedClaim,
    FailureWrite,
    JobEntity,
)
from ratchet_store_sql import schema as s
from ratchet_store_sql._convert import (
    JOB_FIELDS,
    check_execution,
    job_to_row,
    job_values,
    row_to_job,
)
from ratchet_store_sql._dialects.base import (
    CHUNK,
    FAIR_PROBE_SECONDS,
    UTC_TYPE,
    J,
    OnConflictForms,
    ReturningClaim,
    T,
    check_tags,
    claim_params,
    duplicate_error,
    tagged,
)
from ratchet_store_sql._dialects.pg_fair import fair_claim_statement
from ratchet_store_sql._engine import claim_commit_async, explicit_prepare
from ratchet_store_sql._errors import translate
from ratchet_store_sql._types import UtcDateTime

if TYPE_CHECKING:
    from ratchet_store_sql._base import SqlBase

_log = logging.getLogger("ratchet.store")

_CLAIM_COLUMNS = ("status", "priority", "scheduled_at", "execution_target", "fairness_key")
"""The columns whose statistics the claims' plans read (``after_bulk_insert``)."""

ANALYZE_AFTER_ROWS = 1_000
"""A bulk insert of at least this many rows refreshes the table's statistics when the planner
knows fewer rows than were inserted (``PostgresDialect.after_bulk_insert``)."""

_NOW = "timezone('UTC', statement_timestamp())"
# The fence of a write by job id joined to ``v(id, seq)``: ``j.status || ''`` keeps the status
# out of the index conditions, so that the primary key is the way in (``unindexed``)
_FENCE = " WHERE j.id = v.id AND j.claim_seq = v.seq AND j.status || '' = 'RUNNING'"


def _json_rows(rows: Sequence[Sequence[Any]]) -> str:
    """Rows of a hot write as one JSON document (a list of lists, read back by
    :func:`_recordset`): ``json.dumps`` encodes it in C, where psycopg dumps an array
    parameter element by element in Python (measured on the batched success and audit writes:
    25 against 9 µs per 11-column row). Values must be JSON's own types: ids as ``UUID.hex``,
    stamps as naive UTC ISO strings (:func:`_naive_iso`)."""
    return json.dumps(rows, ensure_ascii=False, check_circular=False)


def _recordset(param: str, columns: Mapping[str, str]) -> str:
    """SQL reading the :func:`_json_rows` document ``:param`` as ``v(<columns>)``: each row's
    values by position, cast to the column's type."""
    values = ", ".join(
        f"CAST(r.value ->> {i} AS {kind}) AS {name}"
        for i, (name, kind) in enumerate(columns.items())
    )
    return f"(SELECT {values} FROM json_array_elements(CAST(:{param} AS json)) AS r(value)) AS v"


def _naive_iso(stamp: datetime | None) -> str | None:
    """An aware UTC stamp as the naive ISO text a ``timestamp`` column reads."""
    return None if stamp is None else stamp.replace(tzinfo=None).isoformat()


_PAIRS = {"id": "uuid", "seq": "integer"}


def _pair_rows(pairs: Sequence[tuple[UUID, int]]) -> dict[str, str]:
    return {"rows": _json_rows([(job_id.hex, seq) for job_id, seq in pairs])}


_ASYNC_COMMIT = "(SELECT set_config('synchronous_commit', 'off', true))"
"""SQL that makes the commit of the transaction it runs in not wait for the WAL flush
(``synchronous_commit`` off for that transaction only: safe behind a transaction pooler). Used
by the claim and the started marks unless the URL says ``ratchet_claim_commit=sync``; see
docs/stores/postgresql.md, Durability, for what a crash of the server can then cost."""

_CLAIM_COMMITS_ASYNC: tuple[sa.ColumnElement[bool], ...] = (
    sa.literal_column(f"{_ASYNC_COMMIT} = 'off'", sa.Boolean()),
)


def _dispatch_many(async_commit: bool) -> Any:
    """The started marks of many claims as one statement. ``async_commit``: the commit does
    not wait for the WAL flush (``_ASYNC_COMMIT``, for this statement's own transaction only,
    so only where the statement IS the transaction: autocommit). A started mark sits between a
    job's hand-over to its thread and its start; a mark lost to a crash of the server itself
    (not of a worker) makes recovery give the attempt back to a job that had started, the
    at-least-once rule's usual duplicate. Outcome writes stay synchronous."""
    relaxed = f", {_ASYNC_COMMIT} AS async_commit"
    return sa.text(
        f"UPDATE {J.name} AS j SET dispatched_at = coalesce(j.dispatched_at, {_NOW})"
        f" FROM {_recordset('rows', _PAIRS)}"
        f"{relaxed if async_commit else ''}{_FENCE} RETURNING j.id"
    ).columns(sa.column("id", sa.Uuid()))


_DISPATCH_MANY = _dispatch_many(async_commit=False)
_DISPATCH_MANY_ASYNC_COMMIT = _dispatch_many(async_commit=True)

_SUCCEED_MANY = sa.text(
    f"WITH done AS (UPDATE {J.name} AS j SET status = 'SUCCEEDED', result = v.result,"
    f" owner = NULL, finished_at = {_NOW}, updated_at = {_NOW}"
    f" FROM {_recordset('rows', {**_PAIRS, 'result': 'text'})}"
    f"{_FENCE} RETURNING j.id, j.batch_id),"
    # batch children are counted by the same statement (the BatchStore progress contract)
    f" counted AS (UPDATE {s.batches.name} AS b SET succeeded = b.succeeded + c.n"
    " FROM (SELECT batch_id, count(*) AS n FROM done WHERE batch_id IS NOT NULL"
    " GROUP BY batch_id) AS c WHERE b.id = c.batch_id)"
    " SELECT id FROM done"
).columns(sa.column("id", sa.Uuid()))

_FAILURES = {**_PAIRS, "dead": "boolean", "run_at": "timestamp", "error": "text"}
_FAIL_MANY = sa.text(
    f"WITH done AS (UPDATE {J.name} AS j SET"
    " status = CASE WHEN v.dead THEN 'FAILED' ELSE 'PENDING' END,"
    " scheduled_at = CASE WHEN v.dead THEN j.scheduled_at ELSE v.run_at END,"
    f" finished_at = CASE WHEN v.dead THEN {_NOW} ELSE j.finished_at END,"
    f" last_error = v.error, owner = NULL, updated_at = {_NOW}"
    f" FROM {_recordset('rows', _FAILURES)}"
    f"{_FENCE} RETURNING j.id, j.batch_id, v.dead),"
    # dead letters are counted in their batches by the same statement (BatchStore progress)
    f" counted AS (UPDATE {s.batches.name} AS b SET failed = b.failed + c.n"
    " FROM (SELECT batch_id, count(*) AS n FROM done WHERE dead AND batch_id IS NOT NULL"
    " GROUP BY batch_id) AS c WHERE b.id = c.batch_id)"
    " SELECT id FROM done"
).columns(sa.column("id", sa.Uuid()))

_EXECUTION_COLUMNS = {
    "id": "uuid",
    "job_id": "uuid",
    "attempt": "integer",
    "node_id": "text",
    "status": "text",
    "started_at": "timestamp",
    "finished_at": "timestamp",
    "duration_ms": "bigint",
    "error": "text",
    "traceback": "text",
    "superseded": "boolean",
}
_SAVE_EXECUTIONS = sa.text(
    f"INSERT INTO {s.executions.name} ({', '.join(_EXECUTION_COLUMNS)}) SELECT * FROM "
    + _recordset("rows", _EXECUTION_COLUMNS)
    + " ON CONFLICT (id, started_at) DO UPDATE SET "
    + ", ".join(f"{k} = excluded.{k}" for k in _EXECUTION_COLUMNS if k != "id")
)

_NULL_BY_DEFAULT = frozenset(
    index
    for index, name in enumerate(JOB_FIELDS)
    if J.c[name].nullable and J.c[name].server_default is None and J.c[name].default is None
)
"""Positions (in ``JOB_FIELDS``) of the job columns that are NULL when an INSERT omits them."""


@functools.cache
def _insert_statement(keyed: bool, tags: bool) -> Any:
    """``insert_job`` as one statement, built once per variant (SQLAlchemy then caches its
    compiled form): parameters are the row's columns (and ``_tags``). The job row is skipped
    when its idempotency key exists; its tags go in a data-modifying CTE of the same
    statement."""
    insert = postgresql.insert(J).values(
        {c: sa.bindparam(c, type_=J.c[c].type) for c in JOB_FIELDS}
    )
    if keyed:
        insert = insert.on_conflict_do_nothing(index_elements=[J.c.idempotency_key])
    stmt: Any = insert.returning(J.c.id)
    if tags:
        inserted = stmt.cte("inserted")
        tag_rows = sa.select(
            inserted.c.id,
            sa.func.unnest(sa.bindparam("_tags", type_=postgresql.ARRAY(sa.Text))),
        )
        stmt = sa.select(inserted.c.id).add_cte(
            sa.insert(T).from_select(["job_id", "tag"], tag_rows).cte("inserted_tags")
        )
    return stmt


@functools.cache
def _positional_insert(keyed: bool) -> str:
    """``_insert_statement(keyed, tags=False)`` as driver text with positional parameters in
    ``JOB_FIELDS`` order (``job_values``' tuple as it is)."""
    conflict = " ON CONFLICT (idempotency_key) DO NOTHING" if keyed else ""
    return (
        f"INSERT INTO {J.name} ({', '.join(JOB_FIELDS)}) "
        f"VALUES ({', '.join(['%s'] * len(JOB_FIELDS))}){conflict} RETURNING {J.name}.id"
    )


def _copy_type(column: sa.Column[Any]) -> str:
    """The PostgreSQL type a binary COPY sends ``column``'s values as. Datetimes (aware UTC,
    checked by ``job_values``) go as ``timestamptz``, whose binary form is the very one of a
    ``timestamp without time zone`` (microseconds since 2000-01-01, the UTC instant here):
    the column receives the naive UTC the schema stores, with no per-value conversion."""
    kind = column.type
    if isinstance(kind, UtcDateTime):
        return "timestamptz"
    if isinstance(kind, sa.Uuid):
        return "uuid"
    if isinstance(kind, sa.Integer):
        return "int8" if isinstance(kind, sa.BigInteger) else "int4"
    if isinstance(kind, sa.Boolean):
        return "bool"
    if isinstance(kind, sa.String):  # VARCHAR and TEXT share their binary form
        return "text"
    raise TypeError(f"no binary COPY type for column {column.name} ({kind!r})")


_COPY_TYPES = tuple(_copy_type(J.c[name]) for name in JOB_FIELDS)
"""Per ``JOB_FIELDS`` position, the type of its values in the binary COPY of a bulk insert
(binary: no text formatting and parsing of each value, measured 41 -> 30 ms of client CPU and
85 -> 75 ms in all for 10,000 rows)."""

_CLAIM_NAMES = (*(column.name for column in J.c), "_tags")
"""The columns a plain claim returns, in order (``ReturningClaim._claim_statement``)."""
_CLAIM_STAMPS = tuple(
    index for index, column in enumerate(J.c) if isinstance(column.type, UtcDateTime)
)

_STAMP_INDEXES = tuple(
    index for index, name in enumerate(JOB_FIELDS) if isinstance(J.c[name].type, UtcDateTime)
)


def _execution_document(records: Sequence[ExecutionRecord]) -> dict[str, str]:
    """Execution records as the ``_SAVE_EXECUTIONS`` document, read straight from the
    entities after the converter's checks (``check_execution``: a bad stamp, status or attempt
    is refused naming the field) without its dict and per-value type switch (those were a
    fifth of a worker's CPU with audit on)."""
    rows = []
    for r in records:
        check_execution(r)
        finished = r.finished_at
        rows.append(
            [
                r.id.hex,
                r.job_id.hex,
                r.attempt,
                r.node_id,
                _STATUS_TEXT[r.status],
                r.started_at.replace(tzinfo=None).isoformat(),
                None if finished is None else finished.replace(tzinfo=None).isoformat(),
                r.duration_ms,
                r.error,
                r.traceback,
                r.superseded,
            ]
        )
    return {"rows": _json_rows(rows)}


_STATUS_TEXT = {status: status.value for status in JobStatus}


def _success_document(part: Sequence[Completion]) -> str:
    return _json_rows([(c.job_id.hex, c.claim_seq, c.result) for c in part])


class PostgresDialect(OnConflictForms, ReturningClaim):
    name = "postgresql"
    is_pg = True
    autocommit_statements = True
    tags_in_claim = True
    execution_key = ("id", "started_at")

    def __init__(self, engine: sa.Engine, *, load_tags_on_claim: bool = True) -> None:
        super().__init__(engine, load_tags_on_claim=load_tags_on_claim)
        # claims and started marks commit without waiting for the WAL flush unless the URL
        # says ``ratchet_claim_commit=sync``
        self.async_claim_commit = claim_commit_async(engine)
        self._marks_statement = (
            _DISPATCH_MANY_ASYNC_COMMIT if self.async_claim_commit else _DISPATCH_MANY
        )

    def claim_commit_conditions(self) -> tuple[sa.ColumnElement[bool], ...]:
        return _CLAIM_COMMITS_ASYNC if self.async_claim_commit else ()

    def unindexed(self, column: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
        # ``column || ''``: every job that runs leaves dead entries under 'RUNNING' (and under
        # its node) in the status and owner indexes until the next vacuum; the planner does
        # not count them, and when it took one of those indexes for a fenced write (a close
        # call against the primary key, both estimated at one row) the write read tens of
        # thousands of dead entries (measured: 33,600 per started mark in a 10,000-job run).
        # With these columns out of the index conditions, the primary key is the only way in.
        return sa.type_coerce(column.op("||")(sa.literal("")), sa.String())

    def now_plus(self, seconds: float) -> sa.ColumnElement[datetime]:
        expr: sa.ColumnElement[Any] = sa.func.timezone("UTC", sa.func.statement_timestamp())
        if seconds:
            expr = expr + sa.func.make_interval(0, 0, 0, 0, 0, 0, sa.literal(seconds))
        return sa.type_coerce(expr, UTC_TYPE)

    def seconds_between(
        self, start: sa.ColumnElement[Any], end: sa.ColumnElement[Any]
    ) -> sa.ColumnElement[float]:
        return sa.type_coerce(sa.func.extract("epoch", end - start), sa.Float())

    def conflict_insert(self, table: sa.Table) -> Any:
        return postgresql.insert(table)

    # ------------------------------------------------------------------ hot statements

    def claim_target(self, pick: sa.Select[Any]) -> sa.ColumnElement[bool]:
        picked = pick.with_for_update(skip_locked=True, of=J).cte("picked")
        return J.c.id.in_(sa.select(picked.c.id))

    def picked_rows(self, pick: sa.Select[Any]) -> Any:
        return pick.with_for_update(skip_locked=True, of=J).cte("picked")

    def fair_claim(  # noqa: PLR0917 (the claim's own arguments)
        self,
        conn: sa.Connection,
        node_id: str,
        limit: int,
        execution_targets: Sequence[str] | None,
        tag_filter: NodeTagFilter | None,
        start: int,
    ) -> list[JobEntity]:
        """The fair claim as one statement (``pg_fair``): one round trip, not four."""
        with_tags = self.load_tags_on_claim
        marking = start > 0
        key = (
            "fair",
            None if execution_targets is None else tuple(execution_targets),
            None if tag_filter is None else (tag_filter.required, tag_filter.excluded),
            marking,
        )
        stmt = self._claim_statements.get(key)
        if stmt is None:
            stmt = fair_claim_statement(
                self.now(),
                execution_targets,
                tag_filter,
                with_tags=with_tags,
                marking=marking,
                commit_conditions=self.claim_commit_conditions(),
            )
            if len(self._claim_statements) < 64:
                self._claim_statements[key] = stmt
        params: dict[str, Any] = {"_claim_node": node_id, "_claim_limit": limit}
        if marking:
            params["_claim_start"] = min(start, limit)
        rows: list[Any] = list(conn.execute(stmt, params).mappings())
        if with_tags:
            return [row_to_job(r, r["_tags"] or ()) for r in rows]
        return self.jobs_with_tags(conn, rows)

    def fail_chunk(
        self, conn: sa.Connection, part: Sequence[FailedClaim], now: sa.ColumnElement[datetime]
    ) -> set[UUID]:
        # One constant statement whatever the chunk: the writes travel as one JSON document
        # (``_json_rows``); the dead letters are counted in their batches by the same statement.
        rows = [
            (
                f.job_id.hex,
                f.claim_seq,
                f.kind is FailureWrite.DEAD_LETTER,
                _naive_iso(f.run_at),
                f.error,
            )
            for f in part
        ]
        return set(conn.execute(_FAIL_MANY, {"rows": _json_rows(rows)}).scalars())

    def dispatch_chunk(self, conn: sa.Connection, part: Sequence[tuple[UUID, int]]) -> set[UUID]:
        return set(conn.execute(_DISPATCH_MANY, _pair_rows(part)).scalars())

    def succeed_chunk(
        self, conn: sa.Connection, part: Sequence[Completion], now: sa.ColumnElement[datetime]
    ) -> set[UUID]:
        # One constant statement per batch whatever its size (prepared by psycopg after a few
        # runs): the fenced rows travel as one JSON document (``_json_rows``).
        return set(conn.execute(_SUCCEED_MANY, {"rows": _success_document(part)}).scalars())

    def insert_job(self, store: SqlBase, job: JobEntity) -> JobEntity:
        """One statement, so one round trip in autocommit: the job row (skipped when its
        idempotency key exists), and its tags in a data-modifying CTE of the same statement."""
        row = job_to_row(job)
        tags = sorted(set(job.tags))
        stmt = _insert_statement(job.idempotency_key is not None, bool(tags))
        if tags:
            row = {**row, "_tags": tags}
        if not self._insert(store, stmt, job, row):  # the idempotency key exists
            return self._existing(store, job)
        return tagged(job)

    @staticmethod
    def _existing(store: SqlBase, job: JobEntity) -> JobEntity:
        """The stored job holding ``job``'s idempotency key (its insert wrote nothing)."""
        with store._read("insert_job") as conn:
            existing = store._find_one(conn, J.c.idempotency_key == job.idempotency_key)
        if existing is None:
            # its job was deleted between the two statements
            raise DuplicateJobError(
                f"a job with idempotency key {job.idempotency_key!r} was inserted "
                "and removed concurrently"
            )
        return existing

    def _insert(self, store: SqlBase, stmt: Any, job: JobEntity, row: dict[str, Any]) -> bool:
        """Run the insert statement: True if the row was written, False if its idempotency
        key exists."""
        with store._write_statement("insert_job") as conn:
            try:
                return conn.execute(stmt, row).first() is not None
            except sa.exc.IntegrityError as exc:
                raise duplicate_error(job, exc) from exc

    def after_bulk_insert(self, store: SqlBase, inserted: int) -> None:
        """``ANALYZE ratchet_jobs`` when the planner's row count for the table is below the
        rows just inserted (a new table, or one that grew several-fold since autovacuum last
        looked). With statistics of a near-empty table, PostgreSQL plans the claim as a
        bitmap scan that sorts every pending job (measured: 80-140 ms per claim of 50 with
        200,000 pending, an on-disk sort) instead of reading the claim index in order and
        stopping at the limit (well under a millisecond); autovacuum would fix it only up to
        a minute later. Only the columns the claims filter and order by are analyzed (the
        table's row count is refreshed all the same; autovacuum does the rest): 13 instead of
        23 ms for 20,000 rows here. Best effort: a role that may not analyze the table is
        ignored."""
        if inserted < ANALYZE_AFTER_ROWS:
            return
        try:
            with store._write("analyze") as conn:
                known = conn.execute(
                    sa.text("SELECT reltuples FROM pg_class WHERE oid = CAST(:t AS regclass)"),
                    {"t": J.name},
                ).scalar()
                if known is None or float(known) < inserted:
                    conn.exec_driver_sql(f"ANALYZE {J.name} ({', '.join(_CLAIM_COLUMNS)})")
        except Exception as exc:  # noqa: BLE001 - statistics are an optimisation
            _log.debug("refreshing the statistics of %s failed: %s", J.name, exc)

    def save_executions(self, store: SqlBase, records: Sequence[ExecutionRecord]) -> None:
        # one statement whatever the number of records (one JSON document), so it runs in
        # autocommit: one round trip
        document = _execution_document(records)  # checked before anything is sent
        with store._write_statement("save_executions") as conn:
            conn.execute(_SAVE_EXECUTIONS, document)


class PsycopgDialect(PostgresDialect):
    """PostgreSQL on psycopg 3: the single-statement hot writes go straight on the pooled
    driver connection (SQLAlchemy's per-execution work was a third of a single enqueue), and
    bulk inserts use COPY."""

    def __init__(self, engine: sa.Engine, *, load_tags_on_claim: bool = True) -> None:
        super().__init__(engine, load_tags_on_claim=load_tags_on_claim)
        from psycopg.pq import ExecStatus

        from ratchet_store_sql._lane import StatementLane

        self._compiled: dict[int, tuple[str, dict[str, Any]]] = {}
        # prepared by the driver, except behind a transaction-pooling PgBouncer
        self._prepare = explicit_prepare(engine)
        self._lane = StatementLane(engine)
        self._dbapi_error: type[Exception] = engine.dialect.loaded_dbapi.Error
        self._tuples_ok = ExecStatus.TUPLES_OK

    def close(self) -> None:
        self._lane.close()

    def _sql(self, stmt: Any) -> str:
        """``stmt`` compiled once for the driver (its own parameter style); driver text as
        it is."""
        return stmt if isinstance(stmt, str) else self._compiled_form(stmt)[0]

    def _compiled_form(self, stmt: Any) -> tuple[str, dict[str, Any]]:
        """``stmt`` (kept alive by its owner: the key is its id) compiled once for the
        driver: its text and its constant parameters, processed as SQLAlchemy would bind
        them."""
        form = self._compiled.get(id(stmt))
        if form is None:
            compiled = stmt.compile(dialect=self.engine.dialect)
            constants = {}
            for name, value in compiled.params.items():
                process = compiled.binds[name].type.bind_processor(self.engine.dialect)
                constants[name] = value if value is None or process is None else process(value)
            form = self._compiled[id(stmt)] = (str(compiled), constants)
        return form

    def autocommit(
        self,
        store: SqlBase,
        operation: str,
        stmt: Any,
        params: Mapping[str, Any] | Sequence[Any],
        on_integrity: Callable[[sa.exc.IntegrityError], Exception] | None = None,
    ) -> list[tuple[Any, ...]]:
        """One statement in autocommit (prepared by the driver unless a transaction pooler is
        in between, see ``explicit_prepare``) on a connection of the store's
        ``StatementLane``, else on a pooled psycopg connection; its rows. Driver errors are
        translated as SQLAlchemy's would be (an integrity error by ``on_integrity`` when
        given); a connection found broken is closed (lane) or invalidated (pool)."""
        store._check_open(operation)
        sql = self._sql(stmt)
        lane = self._lane.take()
        if lane is not None:
            cursor = lane.cursor
            try:
                cursor.execute(sql, params, prepare=self._prepare)
                rows = cursor.fetchall() if cursor.pgresult.status == self._tuples_ok else []
            except BaseException as exc:
                if not isinstance(exc, self._dbapi_error):
                    self._lane.give(lane, failed=True)
                    raise
                # classified before the lane may close the connection (a closed connection
                # reads as a lost one)
                error, _lost = self._driver_error(
                    exc, sql, params, operation, on_integrity=on_integrity, driver=lane.driver
                )
                self._lane.give(lane, failed=True)
                raise error from exc
            self._lane.give(lane)
            return rows
        try:
            raw = store._raw_connection()
        except sa.exc.SQLAlchemyError as exc:
            raise translate(exc, operation) from exc
        try:
            driver: Any = raw.driver_connection
            driver.autocommit = True
            try:
                cursor = driver.execute(sql, params, prepare=self._prepare)
                return list(cursor.fetchall()) if cursor.description is not None else []
            finally:
                if not driver.closed:
                    driver.autocommit = False
        except self._dbapi_error as exc:
            error, lost = self._driver_error(
                exc, sql, params, operation, on_integrity=on_integrity, driver=driver
            )
            if lost:
                raw.invalidate(exc)
            raise error from exc
        finally:
            raw.close()

    def _driver_error(
        self,
        exc: Exception,
        sql: str,
        params: Mapping[str, Any] | Sequence[Any],
        operation: str,
        *,
        on_integrity: Callable[[sa.exc.IntegrityError], Exception] | None,
        driver: Any,
    ) -> tuple[Exception, bool]:
        """What ``autocommit`` raises for the driver error ``exc`` of ``driver``: translated
        as SQLAlchemy's would be (by ``on_integrity`` for an integrity error when given); and
        whether the connection was lost."""
        raw_error: Any = exc  # a DBAPI Error (SQLAlchemy types it as its own protocol)
        lost = bool(self.engine.dialect.is_disconnect(raw_error, driver, None))
        shown = dict(params) if isinstance(params, Mapping) else tuple(params)
        error = sa.exc.DBAPIError.instance(
            sql, shown, exc, self._dbapi_error, connection_invalidated=lost
        )
        if on_integrity is not None and isinstance(error, sa.exc.IntegrityError):
            return on_integrity(error), lost
        if isinstance(error, sa.exc.DBAPIError):
            return translate(error, operation), lost
        return error, lost

    def claim_alone(
        self,
        store: SqlBase,
        node_id: str,
        limit: int,
        execution_targets: Sequence[str] | None,
        tag_filter: NodeTagFilter | None,
        *,
        start: int = 0,
    ) -> list[JobEntity] | None:
        """The plain claim (tags in the statement) on the driver in autocommit, its rows
        typed here as SQLAlchemy's result would type them (naive UTC stamps made aware):
        SQLAlchemy's execution and result were a third of a claim's client CPU. None (the
        caller's path) in a caller's transaction, while fair claims are on or their probe is
        due, without tags in the claim, or for a statement with expanding parameters."""
        if store._bound is not None or not (self.tags_in_claim and self.load_tags_on_claim):
            return None
        if self._keyed or time.monotonic() - self._keyed_seen >= FAIR_PROBE_SECONDS:
            return None
        stmt = self.claim_statement(execution_targets, tag_filter, True, start > 0)
        sql, constants = self._compiled_form(stmt)
        if "POSTCOMPILE" in sql:  # an expanding parameter (an IN list): SQLAlchemy renders it
            return None
        rows = self.autocommit(
            store, "claim_next_batch", sql, {**constants, **claim_params(node_id, limit, start)}
        )
        jobs = []
        for row in rows:
            values = list(row)
            for index in _CLAIM_STAMPS:
                stamp = values[index]
                if stamp is not None:
                    values[index] = stamp.replace(tzinfo=UTC)
            mapped = dict(zip(_CLAIM_NAMES, values, strict=True))
            jobs.append(row_to_job(mapped, mapped["_tags"] or ()))
        return jobs

    def succeed_alone(self, store: SqlBase, part: Sequence[Completion]) -> set[UUID] | None:
        if store._bound is not None:
            return None
        rows = self.autocommit(
            store, "mark_succeeded_many", _SUCCEED_MANY, {"rows": _success_document(part)}
        )
        return {row[0] for row in rows}

    def save_executions(self, store: SqlBase, records: Sequence[ExecutionRecord]) -> None:
        if store._bound is not None:
            super().save_executions(store, records)
            return
        document = _execution_document(records)  # checked before anything is sent
        self.autocommit(store, "save_executions", _SAVE_EXECUTIONS, document)

    def mark_dispatched(self, store: SqlBase, pairs: Sequence[tuple[UUID, int]]) -> set[UUID]:
        if store._bound is not None or len(pairs) > CHUNK:
            return super().mark_dispatched(store, pairs)
        rows = self.autocommit(store, "mark_dispatched", self._marks_statement, _pair_rows(pairs))
        return {row[0] for row in rows}

    def insert_job(self, store: SqlBase, job: JobEntity) -> JobEntity:
        """A job without tags outside a caller's transaction: one positional statement built
        from ``job_values`` (no row dict, no per-column bind processing), prepared by the
        driver; the others as :class:`PostgresDialect` does."""
        if store._bound is not None or job.tags:
            return super().insert_job(store, job)
        keyed = job.idempotency_key is not None
        values = list(job_values(job))  # checked (aware UTC datetimes) before anything is sent
        for index in _STAMP_INDEXES:
            stamp = values[index]
            if stamp is not None:  # the column is `timestamp without time zone`: naive UTC
                values[index] = stamp.replace(tzinfo=None)
        rows = self.autocommit(
            store,
            "insert_job",
            _positional_insert(keyed),
            values,
            on_integrity=lambda e: duplicate_error(job, e),
        )
        if not rows:  # the idempotency key exists
            return self._existing(store, job)
        return tagged(job)

    def _insert(self, store: SqlBase, stmt: Any, job: JobEntity, row: dict[str, Any]) -> bool:
        if store._bound is not None:
            return super()._insert(store, stmt, job, row)
        params = {
            k: v.replace(tzinfo=None) if isinstance(v, datetime) else v for k, v in row.items()
        }
        rows = self.autocommit(
            store, "insert_job", stmt, params, on_integrity=lambda e: duplicate_error(job, e)
        )
        return bool(rows)

    def bulk_row(self, job: JobEntity) -> Any:
        return job_values(job)

    def insert_rows(
        self, conn: sa.Connection, rows: list[Any], tag_rows: list[dict[str, Any]]
    ) -> None:
        """The rows (``job_values`` tuples) go with COPY on the transaction's own connection
        (several times faster than a multi-row INSERT). Driver errors are raised as
        SQLAlchemy's, like every other statement of the store."""
        tags = [(tag["job_id"], tag["tag"]) for tag in tag_rows]
        self._copy(conn, iter([rows]), tags)

    streams_parts = True

    def insert_parts(
        self,
        conn: sa.Connection,
        parts: Iterable[Sequence[JobEntity]],
        insert_jobs: Callable[[sa.Connection, Sequence[JobEntity]], int],
    ) -> int:
        """Parts of jobs without idempotency keys go into one COPY as they come: the server
        inserts and indexes a part while the caller builds the next. From the first part
        with a key on, the rest is read whole and goes through ``insert_jobs`` after the
        COPY (a key is looked up before it is written, which a running COPY cannot do)."""
        rest: list[JobEntity] = []
        tags: list[tuple[UUID, str]] = []
        copied = 0

        def rows() -> Iterator[list[tuple[Any, ...]]]:
            nonlocal copied
            source = iter(parts)
            for part in source:
                if any(job.idempotency_key is not None for job in part):
                    rest.extend(part)
                    rest.extend(job for later in source for job in later)
                    return
                self.note_keyed(part)
                out = []
                for job in part:
                    if job.tags:
                        check_tags(job.tags, job.id)
                        tags.extend((job.id, tag) for tag in set(job.tags))
                    out.append(job_values(job))
                copied += len(out)
                yield out

        self._copy(conn, rows(), tags)
        return copied + (insert_jobs(conn, rest) if rest else 0)

    def _copy(
        self,
        conn: sa.Connection,
        parts: Iterator[list[tuple[Any, ...]]],
        tags: list[tuple[UUID, str]],
    ) -> None:
        """``job_values`` rows, a list per part, with COPY on ``conn``; then ``tags`` (read
        after the last part). A column NULL in every row of the first part is left out of
        the COPY (the database writes NULL there itself, and new jobs leave most columns
        empty: a third of the values to format); a later part with a value there ends that
        COPY and starts one with its own columns."""
        driver: Any = conn.connection.driver_connection
        sql = "COPY"
        try:
            with driver.cursor() as cursor:
                part = next(parts, None)
                while part is not None:
                    if not part:
                        part = next(parts, None)
                        continue
                    kept = _kept_columns(part)
                    left_out = [index for index in _NULL_BY_DEFAULT if index not in kept]
                    sql = f"COPY {J.name} ({', '.join(JOB_FIELDS[i] for i in kept)}) " + (
                        "FROM STDIN (FORMAT BINARY)"
                    )
                    project = None if len(kept) == len(JOB_FIELDS) else operator.itemgetter(*kept)
                    with cursor.copy(sql) as copy:
                        copy.set_types([_COPY_TYPES[index] for index in kept])
                        write = copy.write_row
                        first = True
                        while part is not None:
                            if not first and not _all_null(part, left_out):
                                break  # a value in a column this COPY left out
                            first = False
                            if project is None:
                                for row in part:
                                    write(row)
                            else:
                                for row in part:
                                    write(project(row))
                            part = next(parts, None)
                if tags:
                    sql = f"COPY {T.name} (job_id, tag) FROM STDIN (FORMAT BINARY)"
                    with cursor.copy(sql) as copy:
                        copy.set_types(["uuid", "text"])
                        for tag in tags:
                            copy.write_row(tag)
        except self._dbapi_error as exc:
            raise sa.exc.DBAPIError.instance(sql, None, exc, self._dbapi_error) from exc


def _all_null(rows: list[tuple[Any, ...]], positions: list[int]) -> bool:
    """Whether every row is NULL at every one of ``positions``."""
    if not positions:
        return True
    if len(positions) == 1:
        only = positions[0]
        return all(row[only] is None for row in rows)
    values, nulls = operator.itemgetter(*positions), (None,) * len(positions)
    return all(values(row) == nulls for row in rows)


def _kept_columns(rows: list[tuple[Any, ...]]) -> list[int]:
    """The positions a COPY of ``rows`` sends: every column but those of ``_NULL_BY_DEFAULT``
    that are NULL in every row."""
    columns = list(zip(*rows, strict=True))
    count = len(rows)
    return [
        index
        for index, values in enumerate(columns)
        if index not in _NULL_BY_DEFAULT or values.count(None) != count
    ]


__all__ = ["ANALYZE_AFTER_ROWS", "PostgresDialect", "PsycopgDialect"]
