"""The mandatory store sub-protocols: crud, claim, terminal, retry, pause, batch status, bulk,
nodes and tags."""

from __future__ import annotations

import functools
import logging
import operator
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import attrs
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from ratchet_api.errors import DuplicateJobError, JobNotFoundError, StoreDataError
from ratchet_api.model import TERMINAL_STATUSES, JobStatus, NodeTagFilter
from ratchet_api.store.entities import (
    MAX_TAG_LENGTH,
    ChildSettlement,
    Completion,
    JobEntity,
    NodeEntity,
)
from ratchet_store_sql import schema as s
from ratchet_store_sql._base import CHUNK, SqlBase, chunks, retry_conflicts
from ratchet_store_sql._convert import (
    JOB_FIELDS,
    job_to_row,
    job_values,
    node_to_row,
    require_utc,
    row_to_job,
    row_to_node,
)
from ratchet_store_sql._errors import ConnectionLostError, translate

J = s.jobs
T = s.job_tags
PENDING = JobStatus.PENDING.value
_log = logging.getLogger("ratchet.store")
RUNNING = JobStatus.RUNNING.value
TERMINAL = sorted(x.value for x in TERMINAL_STATUSES)


_NULL_BY_DEFAULT = frozenset(
    index
    for index, name in enumerate(JOB_FIELDS)
    if J.c[name].nullable and J.c[name].server_default is None and J.c[name].default is None
)
"""Positions (in ``JOB_FIELDS``) of the job columns that are NULL when an INSERT omits them."""


def _check_tags(tags: Sequence[str], job_id: UUID | None = None) -> None:
    for tag in tags:
        if not isinstance(tag, str) or not tag:
            raise StoreDataError("tags", f"every tag must be a non-empty string, got {tag!r}")
        if len(tag) > MAX_TAG_LENGTH:
            raise StoreDataError(
                "tags",
                f"tag {tag[:20]!r}... is {len(tag)} characters, the limit is {MAX_TAG_LENGTH}",
                job_id=job_id,
            )


def _seconds(value: timedelta, field: str) -> float:
    if not isinstance(value, timedelta):
        raise StoreDataError(field, f"expected a timedelta, got {type(value).__name__}")
    return value.total_seconds()


_PG_NOW = "timezone('UTC', statement_timestamp())"
ANALYZE_AFTER_ROWS = 1_000
"""A PostgreSQL bulk insert of at least this many rows refreshes the table's statistics when
the planner knows fewer rows than were inserted (``_refresh_statistics``)."""
# The fence of a write by job id joined to ``v(id, seq)``: ``j.status || ''`` keeps the status
# out of the index conditions, so that the primary key is the way in (``Dialect.unindexed``)
_PG_FENCE = " WHERE j.id = v.id AND j.claim_seq = v.seq AND j.status || '' = 'RUNNING'"
_PG_DISPATCH_MANY = sa.text(
    f"UPDATE ratchet_jobs AS j SET dispatched_at = coalesce(j.dispatched_at, {_PG_NOW})"
    " FROM unnest(CAST(:ids AS uuid[]), CAST(:seqs AS integer[])) AS v(id, seq)"
    f"{_PG_FENCE} RETURNING j.id"
).columns(sa.column("id", sa.Uuid()))
# the same statement for the driver itself (``_pg_autocommit``): a started mark sits between a
# job's hand-over to its thread and its start, so SQLAlchemy's per-execution work counts there
# and its commit does not wait for the WAL flush (``synchronous_commit`` off for this statement's
# own transaction only): a mark lost to a crash of the server itself (not of a worker) makes
# recovery give the attempt back to a job that had started, the at-least-once rule's usual
# duplicate; every other write of the store stays synchronous
_PG_DISPATCH_RAW = (
    f"UPDATE ratchet_jobs AS j SET dispatched_at = coalesce(j.dispatched_at, {_PG_NOW})"
    " FROM unnest(%(ids)s::uuid[], %(seqs)s::integer[]) AS v(id, seq),"
    " (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit"
    f"{_PG_FENCE} RETURNING j.id"
)
_PG_SUCCEED_MANY = sa.text(
    "WITH done AS (UPDATE ratchet_jobs AS j SET status = 'SUCCEEDED', result = v.result,"
    f" owner = NULL, finished_at = {_PG_NOW}, updated_at = {_PG_NOW}"
    " FROM unnest(CAST(:ids AS uuid[]), CAST(:seqs AS integer[]), CAST(:results AS text[]))"
    " AS v(id, seq, result)"
    f"{_PG_FENCE} RETURNING j.id, j.batch_id),"
    # batch children are counted by the same statement (the BatchStore progress contract)
    " counted AS (UPDATE ratchet_batches AS b SET succeeded = b.succeeded + c.n"
    " FROM (SELECT batch_id, count(*) AS n FROM done WHERE batch_id IS NOT NULL"
    " GROUP BY batch_id) AS c WHERE b.id = c.batch_id)"
    " SELECT id FROM done"
).columns(sa.column("id", sa.Uuid()))


@functools.cache
def _pg_insert_statement(keyed: bool, tagged: bool) -> Any:
    """``insert_job`` on PostgreSQL as one statement, built once per variant (SQLAlchemy then
    caches its compiled form): parameters are the row's columns (and ``_tags``)."""
    insert = postgresql.insert(J).values(
        {c: sa.bindparam(c, type_=J.c[c].type) for c in JOB_FIELDS}
    )
    if keyed:
        insert = insert.on_conflict_do_nothing(index_elements=[J.c.idempotency_key])
    stmt: Any = insert.returning(J.c.id)
    if tagged:
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
def _sqlite_job_insert() -> str:
    columns = ", ".join(JOB_FIELDS)
    return f"INSERT INTO {J.name} ({columns}) VALUES ({', '.join('?' * len(JOB_FIELDS))})"


def _sqlite_params(conn: sa.Connection, rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Rows as sqlite3 parameter tuples, each value through its column type's bind processor
    (the conversions SQLAlchemy applies, without its per-row statement work)."""
    processors = [J.c[f].type.bind_processor(conn.dialect) for f in JOB_FIELDS]
    values = operator.itemgetter(*JOB_FIELDS)
    return [
        tuple(
            v if p is None or v is None else p(v)
            for p, v in zip(processors, values(r), strict=True)
        )
        for r in rows
    ]


_COMPILED: dict[tuple[int, str], str] = {}


def _pg_compiled(stmt: Any, dialect: sa.Dialect) -> str:
    key = (id(stmt), dialect.driver)
    sql = _COMPILED.get(key)
    if sql is None:
        sql = _COMPILED[key] = str(stmt.compile(dialect=dialect))
    return sql


def _same_job(stored: JobEntity, job: JobEntity) -> bool:
    """The stored row is ``job`` (written by an attempt whose outcome was lost)."""
    return (stored.target, stored.payload, stored.idempotency_key) == (
        job.target,
        job.payload,
        job.idempotency_key,
    )


def _claim_filter(
    now: sa.ColumnElement[datetime],
    execution_targets: Sequence[str] | None,
    tag_filter: NodeTagFilter | None,
) -> list[sa.ColumnElement[bool]]:
    """The conditions a claimable job meets: due, PENDING, served here (label, tags)."""
    where: list[sa.ColumnElement[bool]] = [J.c.status == PENDING, J.c.scheduled_at <= now]
    if execution_targets is not None:
        where.append(
            sa.or_(
                J.c.execution_target.is_(None),
                J.c.execution_target.in_(list(execution_targets)),
            )
        )
    if tag_filter is not None and not tag_filter.is_empty:
        for tag in sorted(tag_filter.required):
            where.append(sa.exists().where(T.c.job_id == J.c.id, T.c.tag == tag))
        if tag_filter.excluded:
            excluded = sorted(tag_filter.excluded)
            where.append(~sa.exists().where(T.c.job_id == J.c.id, T.c.tag.in_(excluded)))
    return where


def _claim_values(owner: Any) -> dict[str, Any]:
    """What a claim writes besides its timestamps (``owner``: the node, or its parameter)."""
    return {
        "status": RUNNING,
        "owner": owner,
        "attempt": J.c.attempt + 1,
        "claim_seq": J.c.claim_seq + 1,
        "dispatched_at": None,
    }


class JobOperations(SqlBase):
    """Implements ``ratchet_api.store.JobStore`` (every mandatory sub-protocol)."""

    # ------------------------------------------------------------------ crud

    def insert_job(self, job: JobEntity) -> JobEntity:
        row = job_to_row(job)
        _check_tags(job.tags, job.id)
        if self._bound is not None:
            return self._insert_job_once(job, row)
        try:
            return self._insert_job_once(job, row)
        except ConnectionLostError:
            # The connection broke under the insert (its own transaction, or one autocommit
            # statement): it either committed whole or not at all. Send it again on a fresh
            # connection; if the first one did commit, the job's id is taken by this very job.
            pass
        try:
            return self._insert_job_once(job, row)
        except DuplicateJobError:
            stored = self.find_by_id(job.id)
            if stored is not None and _same_job(stored, job):
                return stored
            raise

    def _insert_job_once(self, job: JobEntity, row: dict[str, Any]) -> JobEntity:
        if self._d.is_pg:
            return self._insert_job_pg(job, row)
        with self._write("insert_job") as conn:
            if job.idempotency_key is not None:
                existing = self._find_one(conn, J.c.idempotency_key == job.idempotency_key)
                if existing is not None:
                    return existing
            try:
                conn.execute(sa.insert(J), [row])
            except sa.exc.IntegrityError as exc:
                raise self._duplicate(conn, job, exc) from exc
            if job.tags:
                conn.execute(sa.insert(T), [{"job_id": job.id, "tag": t} for t in set(job.tags)])
        return attrs.evolve(job, tags=(*sorted(set(job.tags)),))

    def _insert_job_pg(self, job: JobEntity, row: dict[str, Any]) -> JobEntity:
        """One statement, so one round trip in autocommit: the job row (skipped when its
        idempotency key exists), and its tags in a data-modifying CTE of the same statement."""
        tags = sorted(set(job.tags))
        stmt = _pg_insert_statement(job.idempotency_key is not None, bool(tags))
        if tags:
            row = {**row, "_tags": tags}
        if self._bound is None and self._engine.dialect.driver == "psycopg":
            written = self._insert_job_psycopg(stmt, job, row)
        else:
            with self._write_statement("insert_job") as conn:
                try:
                    written = conn.execute(stmt, row).first() is not None
                except sa.exc.IntegrityError as exc:
                    raise self._duplicate(conn, job, exc) from exc
        if not written:  # the idempotency key exists: the first job stands
            with self._read("insert_job") as conn:
                existing = self._find_one(conn, J.c.idempotency_key == job.idempotency_key)
                if existing is None:
                    # its job was deleted between the two statements
                    raise DuplicateJobError(
                        f"a job with idempotency key {job.idempotency_key!r} was inserted "
                        "and removed concurrently"
                    )
                return existing
        if list(job.tags) == tags:
            return job
        return attrs.evolve(job, tags=(*tags,))

    def _pg_autocommit(
        self,
        operation: str,
        sql: str,
        params: Mapping[str, Any],
        on_integrity: Callable[[sa.exc.IntegrityError], Exception] | None = None,
    ) -> list[tuple[Any, ...]]:
        """One statement straight on the pooled psycopg connection in autocommit (prepared by
        the driver); its rows. Driver errors are translated as SQLAlchemy's would be (an
        integrity error by ``on_integrity`` when given), and a connection found broken is
        invalidated."""
        self._check_open(operation)
        try:
            raw = self._raw_connection()
        except sa.exc.SQLAlchemyError as exc:
            raise translate(exc, operation) from exc
        try:
            driver: Any = raw.driver_connection
            driver.autocommit = True
            try:
                return list(driver.execute(sql, params, prepare=True).fetchall())
            finally:
                if not driver.closed:
                    driver.autocommit = False
        except Exception as exc:
            dbapi_error = self._engine.dialect.loaded_dbapi.Error
            lost = getattr(driver, "broken", False) or (
                isinstance(exc, dbapi_error) and self._engine.dialect.is_disconnect(exc, raw, None)
            )
            error = sa.exc.DBAPIError.instance(
                sql, dict(params), exc, dbapi_error, connection_invalidated=lost
            )
            if lost:
                raw.invalidate(exc)
            if on_integrity is not None and isinstance(error, sa.exc.IntegrityError):
                raise on_integrity(error) from exc
            if isinstance(error, sa.exc.DBAPIError):
                raise translate(error, operation) from exc
            raise
        finally:
            raw.close()

    def _insert_job_psycopg(self, stmt: Any, job: JobEntity, row: dict[str, Any]) -> bool:
        """The single insert statement straight on the pooled psycopg connection in autocommit
        (SQLAlchemy's per-execution work is a third of a single enqueue). True if the row was
        written, False if its idempotency key exists."""
        params = {
            k: v.replace(tzinfo=None) if isinstance(v, datetime) else v for k, v in row.items()
        }
        rows = self._pg_autocommit(
            "insert_job",
            _pg_compiled(stmt, self._engine.dialect),
            params,
            on_integrity=lambda error: self._duplicate(None, job, error),
        )
        return bool(rows)

    def _duplicate(
        self, conn: sa.Connection | None, job: JobEntity, exc: sa.exc.IntegrityError
    ) -> Exception:
        text = str(exc.orig).lower()
        if job.idempotency_key is not None and "idempotency" in text:
            return DuplicateJobError(
                f"a job with idempotency key {job.idempotency_key!r} was inserted concurrently"
            )
        return DuplicateJobError(f"job {job.id} already exists")

    def _find_one(self, conn: sa.Connection, where: sa.ColumnElement[bool]) -> JobEntity | None:
        found = self._select_jobs(conn, sa.select(J).where(where))
        return found[0] if found else None

    def find_by_id(self, job_id: UUID) -> JobEntity | None:
        with self._read("find_by_id") as conn:
            return self._find_one(conn, J.c.id == job_id)

    def find_by_idempotency_key(self, key: str) -> JobEntity | None:
        with self._read("find_by_idempotency_key") as conn:
            return self._find_one(conn, J.c.idempotency_key == key)

    def update_job(self, job: JobEntity) -> JobEntity:
        row = job_to_row(job)
        _check_tags(job.tags, job.id)
        del row["id"]
        row["updated_at"] = self._d.now()
        with self._write("update_job") as conn:
            if conn.execute(sa.update(J).where(J.c.id == job.id).values(**row)).rowcount == 0:
                raise JobNotFoundError(job.id)
            conn.execute(sa.delete(T).where(T.c.job_id == job.id))
            if job.tags:
                conn.execute(sa.insert(T), [{"job_id": job.id, "tag": t} for t in set(job.tags)])
            stored = self._find_one(conn, J.c.id == job.id)
        assert stored is not None
        return stored

    def delete_job(self, job_id: UUID) -> bool:
        with self._write("delete_job") as conn:
            for table in (T, s.job_properties, s.job_state):
                conn.execute(sa.delete(table).where(table.c.job_id == job_id))
            conn.execute(sa.delete(s.executions).where(s.executions.c.job_id == job_id))
            conn.execute(sa.delete(s.job_logs).where(s.job_logs.c.job_id == job_id))
            return bool(conn.execute(sa.delete(J).where(J.c.id == job_id)).rowcount)

    # ------------------------------------------------------------------ claim

    def claim_next_batch(
        self,
        node_id: str,
        limit: int,
        *,
        execution_targets: Sequence[str] | None = None,
        tag_filter: NodeTagFilter | None = None,
    ) -> list[JobEntity]:
        if limit <= 0:
            return []
        # on PostgreSQL the claim is one statement: autocommit, one round trip
        with self._write_statement("claim_next_batch") as conn:
            claimed = self._claim(conn, node_id, limit, execution_targets, tag_filter)
        claimed.sort(key=lambda j: (-int(j.priority), j.scheduled_at, j.id))
        return claimed

    def _returning_claim(
        self,
        execution_targets: Sequence[str] | None,
        tag_filter: NodeTagFilter | None,
        with_tags: bool,
    ) -> Any:
        """The claim as one ``UPDATE ... RETURNING`` (PostgreSQL, SQLite), with the node and
        the limit as parameters (``_claim_node``, ``_claim_limit``): built once per filter and
        kept (building it cost about a fifth of a claim's client CPU)."""
        d = self._d
        now = d.now()
        where = _claim_filter(now, execution_targets, tag_filter)
        pick = (
            sa.select(J.c.id)
            .where(*where)
            .order_by(J.c.priority.desc(), J.c.scheduled_at, J.c.id)
            .limit(sa.bindparam("_claim_limit", type_=sa.Integer()))
        )
        if d.is_pg:
            picked = pick.with_for_update(skip_locked=True).cte("picked")
            target = J.c.id.in_(sa.select(picked.c.id))
        else:  # SQLite: BEGIN IMMEDIATE already holds the write lock
            target = J.c.id.in_(pick.scalar_subquery())
        returned: list[Any] = list(J.c)
        if with_tags:
            # the tags come back with the claimed rows: no second round trip
            returned.append(
                sa.select(sa.func.array_agg(T.c.tag))
                .where(T.c.job_id == J.c.id)
                .scalar_subquery()
                .label("_tags")
            )
        values = _claim_values(sa.bindparam("_claim_node", type_=J.c.owner.type))
        return (
            sa.update(J)
            .where(target)
            .values(started_at=now, heartbeat_at=now, updated_at=now, **values)
            .returning(*returned)
        )

    def _claim(
        self,
        conn: sa.Connection,
        node_id: str,
        limit: int,
        execution_targets: Sequence[str] | None,
        tag_filter: NodeTagFilter | None,
    ) -> list[JobEntity]:
        d = self._d
        if d.returning:
            with_tags = d.is_pg and self._load_tags_on_claim
            key = (
                None if execution_targets is None else tuple(execution_targets),
                None if tag_filter is None else (tag_filter.required, tag_filter.excluded),
                with_tags,
            )
            stmt = self._claim_statements.get(key)
            if stmt is None:
                stmt = self._returning_claim(execution_targets, tag_filter, with_tags)
                if len(self._claim_statements) < 64:
                    self._claim_statements[key] = stmt
            rows: list[Any] = list(
                conn.execute(stmt, {"_claim_node": node_id, "_claim_limit": limit}).mappings()
            )
            if with_tags:
                return [row_to_job(r, r["_tags"] or ()) for r in rows]
        else:
            # MariaDB/MySQL: no UPDATE ... RETURNING. Lock the picked rows (skipping rows other
            # claimers hold), update them by id, and build the result from the locked rows.
            now = d.now()
            where = _claim_filter(now, execution_targets, tag_filter)
            skip = self._skip_locked(conn)
            locked = list(
                conn.execute(
                    sa.select(J, now.label("_now"))
                    .where(*where)
                    .order_by(J.c.priority.desc(), J.c.scheduled_at, J.c.id)
                    .limit(limit)
                    .with_for_update(skip_locked=skip)
                ).mappings()
            )
            if not locked:
                return []
            stamp = locked[0]["_now"]
            ids = [r["id"] for r in locked]
            conn.execute(
                sa.update(J)
                .where(J.c.id.in_(ids), J.c.status == PENDING)
                .values(
                    started_at=stamp, heartbeat_at=stamp, updated_at=stamp, **_claim_values(node_id)
                )
            )
            rows = []
            for r in locked:
                row = dict(r)
                row.update(
                    status=RUNNING,
                    owner=node_id,
                    attempt=r["attempt"] + 1,
                    claim_seq=r["claim_seq"] + 1,
                    started_at=stamp,
                    heartbeat_at=stamp,
                    updated_at=stamp,
                    dispatched_at=None,
                )
                rows.append(row)
        if not rows:
            return []
        if self._load_tags_on_claim:
            tags = self._tags_for(conn, [r["id"] for r in rows])
            return [row_to_job(r, tags.get(r["id"], ())) for r in rows]
        return [row_to_job(r) for r in rows]

    def _skip_locked(self, conn: sa.Connection) -> bool:
        version = conn.dialect.server_version_info or ()
        if getattr(conn.dialect, "is_mariadb", False):
            return tuple(version[:2]) >= (10, 6)
        return tuple(version[:1]) >= (8,)

    def mark_dispatched(self, claims: Mapping[UUID, int]) -> set[UUID]:
        if not claims:
            return set()
        pairs = list(claims.items())
        if (
            self._d.is_pg
            and self._engine.dialect.driver == "psycopg"
            and self._bound is None
            and len(pairs) <= CHUNK
        ):
            rows = self._pg_autocommit(
                "mark_dispatched",
                _PG_DISPATCH_RAW,
                {"ids": [job_id for job_id, _ in pairs], "seqs": [seq for _, seq in pairs]},
            )
            return {row[0] for row in rows}
        applied: set[UUID] = set()
        write = self._write_statement if len(pairs) <= CHUNK else self._write
        with write("mark_dispatched") as conn:
            for part in chunks(pairs):
                applied |= self._dispatch_chunk(conn, part)
        return applied

    def _running_claims(self, pairs: Sequence[tuple[UUID, int]]) -> sa.ColumnElement[bool]:
        """The fence of a write by (job id, claim sequence): the job is still RUNNING under that
        claim. The ids come first so that the primary key is the way in."""
        return sa.and_(
            J.c.id.in_([job_id for job_id, _ in pairs]),
            sa.tuple_(J.c.id, J.c.claim_seq).in_(list(pairs)),
            self._d.unindexed(J.c.status) == RUNNING,
        )

    def _dispatch_chunk(self, conn: sa.Connection, part: Sequence[tuple[UUID, int]]) -> set[UUID]:
        if self._d.is_pg:
            return set(
                conn.execute(
                    _PG_DISPATCH_MANY,
                    {"ids": [job_id for job_id, _ in part], "seqs": [seq for _, seq in part]},
                ).scalars()
            )
        fence = self._running_claims(part)
        # the first mark of a claim stands (a repeated mark still reports the claim current)
        stamp = sa.func.coalesce(J.c.dispatched_at, self._d.now())
        if self._d.returning:
            stmt = sa.update(J).where(fence).values(dispatched_at=stamp).returning(J.c.id)
            return set(conn.execute(stmt).scalars())
        locked = set(conn.execute(sa.select(J.c.id).where(fence).with_for_update()).scalars())
        if locked:
            conn.execute(sa.update(J).where(J.c.id.in_(list(locked))).values(dispatched_at=stamp))
        return locked

    # ------------------------------------------------------------------ fenced writes

    def _fenced(
        self,
        operation: str,
        job_id: UUID,
        claim_seq: int,
        values: dict[str, Any],
        extra: sa.ColumnElement[bool] | None = None,
        *,
        finishes: bool | None = None,
    ) -> bool:
        """A fenced update of one RUNNING job (``extra``: one more condition). ``finishes``
        (True: succeeded, False: failed) marks a terminal write, which also counts the job in
        its batch in the same transaction."""
        values.setdefault("updated_at", self._d.now())
        where = [
            J.c.id == job_id,
            J.c.claim_seq == claim_seq,
            self._d.unindexed(J.c.status) == RUNNING,
        ]
        if extra is not None:
            where.append(extra)
        write = self._write_statement if finishes is None else self._write
        with write(operation) as conn:
            stmt = sa.update(J).where(*where).values(**values)
            applied = conn.execute(stmt).rowcount == 1
            if applied and finishes is not None:
                self._count_batch_child(conn, job_id, finishes)
            return applied

    def mark_succeeded(self, job_id: UUID, claim_seq: int, result: str | None) -> bool:
        now = self._d.now()
        return self._fenced(
            "mark_succeeded",
            job_id,
            claim_seq,
            {
                "status": JobStatus.SUCCEEDED.value,
                "result": result,
                "finished_at": now,
                "owner": None,
            },
            finishes=True,
        )

    def mark_succeeded_many(self, completions: Sequence[Completion]) -> set[UUID]:
        if not completions:
            return set()
        latest: dict[UUID, Completion] = {c.job_id: c for c in completions}
        applied: set[UUID] = set()
        now = self._d.now()
        # one statement per chunk: a single chunk on PostgreSQL runs in autocommit
        write = self._write_statement if len(latest) <= CHUNK else self._write
        with write("mark_succeeded_many") as conn:
            for part in chunks(list(latest.values())):
                applied |= self._succeed_chunk(conn, part, now)
        return applied

    def _succeed_chunk(
        self, conn: sa.Connection, part: Sequence[Completion], now: sa.ColumnElement[datetime]
    ) -> set[UUID]:
        if self._d.is_pg:
            # One constant statement per batch whatever its size (prepared by psycopg after a
            # few runs): the fenced pairs travel as three arrays joined back with unnest.
            return set(
                conn.execute(
                    _PG_SUCCEED_MANY,
                    {
                        "ids": [c.job_id for c in part],
                        "seqs": [c.claim_seq for c in part],
                        "results": [c.result for c in part],
                    },
                ).scalars()
            )
        fence = self._running_claims([(c.job_id, c.claim_seq) for c in part])
        results = {c.result for c in part}
        result: Any
        if len(results) == 1:
            result = next(iter(results))
        else:
            result = sa.case({c.job_id: c.result for c in part}, value=J.c.id)
        values = {
            "status": JobStatus.SUCCEEDED.value,
            "result": result,
            "finished_at": now,
            "updated_at": now,
            "owner": None,
        }
        if self._d.returning:
            stmt = sa.update(J).where(fence).values(**values).returning(J.c.id, J.c.batch_id)
            done = list(conn.execute(stmt))
        else:
            done = list(
                conn.execute(sa.select(J.c.id, J.c.batch_id).where(fence).with_for_update())
            )
            if done:
                ids = [row[0] for row in done]
                conn.execute(sa.update(J).where(J.c.id.in_(ids)).values(**values))
        per_batch: dict[UUID, int] = {}
        for _, batch_id in done:
            if batch_id is not None:
                per_batch[batch_id] = per_batch.get(batch_id, 0) + 1
        if per_batch:
            self._count_batch_children(conn, per_batch)
        return {row[0] for row in done}

    def mark_failed_terminal(self, job_id: UUID, claim_seq: int, error: str) -> bool:
        return self._fenced(
            "mark_failed_terminal",
            job_id,
            claim_seq,
            {
                "status": JobStatus.FAILED.value,
                "last_error": error,
                "finished_at": self._d.now(),
                "owner": None,
            },
            finishes=False,
        )

    @retry_conflicts
    def cancel_job(self, job_id: UUID) -> bool:
        now = self._d.now()
        with self._write("cancel_job") as conn:
            stmt = (
                sa.update(J)
                .where(J.c.id == job_id, J.c.status.not_in(TERMINAL))
                .values(
                    status=JobStatus.CANCELLED.value,
                    finished_at=now,
                    updated_at=now,
                    owner=None,
                )
            )
            cancelled = conn.execute(stmt).rowcount == 1
            if cancelled:
                self._count_batch_child(conn, job_id, False)
            return cancelled

    # ------------------------------------------------------------------ retry

    def schedule_retry(self, job_id: UUID, claim_seq: int, run_at: datetime, error: str) -> bool:
        require_utc(run_at, "run_at")
        return self._fenced(
            "schedule_retry",
            job_id,
            claim_seq,
            {"status": PENDING, "scheduled_at": run_at, "last_error": error, "owner": None},
        )

    def retry_dead_letter(self, job_id: UUID, run_at: datetime | None = None) -> bool:
        require_utc(run_at, "run_at")
        now = self._d.now()
        with self._write("retry_dead_letter") as conn:
            stmt = (
                sa.update(J)
                .where(J.c.id == job_id, J.c.status == JobStatus.FAILED.value)
                .values(
                    status=PENDING,
                    scheduled_at=run_at if run_at is not None else now,
                    attempt=0,
                    finished_at=None,
                    owner=None,
                    updated_at=now,
                )
            )
            return conn.execute(stmt).rowcount == 1

    # ------------------------------------------------------------------ pause

    def _swap(self, operation: str, job_id: UUID, old: str, new: str, **extra: Any) -> bool:
        with self._write(operation) as conn:
            stmt = (
                sa.update(J)
                .where(J.c.id == job_id, J.c.status == old)
                .values(status=new, updated_at=self._d.now(), **extra)
            )
            return conn.execute(stmt).rowcount == 1

    def pause_job(self, job_id: UUID) -> bool:
        return self._swap("pause_job", job_id, PENDING, JobStatus.PAUSED.value)

    def resume_job(self, job_id: UUID) -> bool:
        return self._swap("resume_job", job_id, JobStatus.PAUSED.value, PENDING)

    # ------------------------------------------------------------------ batch status

    def compare_and_swap_status(self, job_id: UUID, expected: JobStatus, new: JobStatus) -> bool:
        expected_s = JobStatus(expected).value
        new_s = JobStatus(new).value
        extra: dict[str, Any] = {}
        if JobStatus(new).is_terminal:
            extra["finished_at"] = self._d.now()
        if JobStatus(new) is not JobStatus.RUNNING:
            extra["owner"] = None
        return self._swap("compare_and_swap_status", job_id, expected_s, new_s, **extra)

    def release_claim(
        self,
        job_id: UUID,
        claim_seq: int,
        *,
        run_at: datetime | None = None,
        unless_dispatched: bool = False,
    ) -> bool:
        require_utc(run_at, "run_at")
        values: dict[str, Any] = {
            "status": PENDING,
            "attempt": sa.case((J.c.attempt > 0, J.c.attempt - 1), else_=0),
            "owner": None,
            "started_at": None,
            "heartbeat_at": None,
            "dispatched_at": None,
        }
        if run_at is not None:
            values["scheduled_at"] = run_at
        return self._fenced(
            "release_claim",
            job_id,
            claim_seq,
            values,
            J.c.dispatched_at.is_(None) if unless_dispatched else None,
        )

    @retry_conflicts
    def reset_running_jobs(self, node_id: str) -> int:
        with self._write("reset_running_jobs") as conn:
            stmt = (
                sa.update(J)
                .where(J.c.owner == node_id, J.c.status == RUNNING)
                .values(status=PENDING, owner=None, updated_at=self._d.now())
            )
            return int(conn.execute(stmt).rowcount)

    def find_children(self, parent_id: UUID) -> list[JobEntity]:
        with self._read("find_children") as conn:
            return self._select_jobs(
                conn,
                sa.select(J).where(J.c.parent_id == parent_id).order_by(J.c.created_at, J.c.id),
            )

    def release_waiting_children(self, parent_id: UUID, child_ids: Sequence[UUID]) -> int:
        if not child_ids:
            return 0
        now = self._d.now()
        count = 0
        with self._write("release_waiting_children") as conn:
            for part in chunks(list(child_ids)):
                stmt = (
                    sa.update(J)
                    .where(
                        J.c.parent_id == parent_id,
                        J.c.id.in_(part),
                        J.c.status == JobStatus.WAITING.value,
                    )
                    .values(status=PENDING, scheduled_at=now, updated_at=now)
                )
                count += conn.execute(stmt).rowcount
        return count

    @retry_conflicts
    def settle_children(self, parent_id: UUID, settlements: Sequence[ChildSettlement]) -> set[UUID]:
        if not settlements:
            return set()
        now = self._d.now()
        moved: set[UUID] = set()
        with self._write("settle_children") as conn:
            for item in settlements:
                require_utc(item.signal_deadline, "signal_deadline")
                values: dict[str, Any] = {"status": item.status.value, "updated_at": now}
                if item.status is JobStatus.PENDING:
                    values["scheduled_at"] = now
                elif item.status is JobStatus.AWAITING_SIGNAL:
                    values["signal_deadline"] = item.signal_deadline
                else:
                    values.update(finished_at=now, last_error=item.reason, owner=None)
                stmt = (
                    sa.update(J)
                    .where(
                        J.c.id == item.child_id,
                        J.c.parent_id == parent_id,
                        J.c.status == JobStatus.WAITING.value,
                    )
                    .values(**values)
                )
                if conn.execute(stmt).rowcount == 1:
                    moved.add(item.child_id)
        return moved

    def find_orphaned_children(self, limit: int) -> list[JobEntity]:
        parent = J.alias("parent")
        stmt = (
            sa.select(J)
            .outerjoin(parent, parent.c.id == J.c.parent_id)
            .where(
                J.c.status == JobStatus.WAITING.value,
                J.c.parent_id.is_not(None),
                sa.or_(parent.c.id.is_(None), parent.c.status.in_(TERMINAL)),
            )
            .order_by(J.c.created_at, J.c.id)
            .limit(limit)
        )
        with self._read("find_orphaned_children") as conn:
            return self._select_jobs(conn, stmt)

    # ------------------------------------------------------------------ bulk

    def bulk_insert(self, jobs: Sequence[JobEntity]) -> int:
        if not jobs:
            return 0
        with self._write("bulk_insert") as conn:
            inserted = self._insert_jobs(conn, jobs)
        if inserted >= ANALYZE_AFTER_ROWS and self._d.is_pg and self._bound is None:
            self._refresh_statistics(inserted)
        return inserted

    def _refresh_statistics(self, inserted: int) -> None:
        """``ANALYZE ratchet_jobs`` when the planner's row count for the table is below the
        rows just inserted (a new table, or one that grew several-fold since autovacuum last
        looked). With statistics of a near-empty table, PostgreSQL plans the claim as a
        bitmap scan that sorts every pending job (measured: 80-140 ms per claim of 50 with
        200,000 pending, an on-disk sort) instead of reading the claim index in order and
        stopping at the limit (well under a millisecond); autovacuum would fix it only up to
        a minute later. Best effort: a role that may not analyze the table is ignored."""
        try:
            with self._write("analyze") as conn:
                known = conn.execute(
                    sa.text("SELECT reltuples FROM pg_class WHERE oid = CAST(:t AS regclass)"),
                    {"t": J.name},
                ).scalar()
                if known is None or float(known) < inserted:
                    conn.exec_driver_sql(f"ANALYZE {J.name}")
        except Exception as exc:  # noqa: BLE001 - statistics are an optimisation
            _log.debug("refreshing the statistics of %s failed: %s", J.name, exc)

    def _insert_jobs(self, conn: sa.Connection, jobs: Sequence[JobEntity]) -> int:
        """``bulk_insert`` on the caller's connection (idempotency keys that exist skipped)."""
        copy = self._d.is_pg and self._engine.dialect.driver == "psycopg"
        # every job is checked and converted, also a duplicate that is then skipped
        to_row: Any = job_values if copy else job_to_row
        rows: list[tuple[JobEntity, Any]] = []
        keyed: dict[str, JobEntity] = {}
        for job in jobs:
            if job.tags:
                _check_tags(job.tags, job.id)
            row = to_row(job)
            if job.idempotency_key is not None:
                if job.idempotency_key in keyed:
                    continue  # a later duplicate of a key in the same batch: skipped
                keyed[job.idempotency_key] = job
            rows.append((job, row))
        if keyed:
            existing: set[str] = set()
            for part in chunks(list(keyed)):
                existing.update(
                    conn.execute(
                        sa.select(J.c.idempotency_key).where(J.c.idempotency_key.in_(part))
                    ).scalars()
                )
            if existing:
                rows = [(job, row) for job, row in rows if job.idempotency_key not in existing]
        if not rows:
            return 0
        tag_rows = [
            {"job_id": job.id, "tag": tag} for job, _ in rows if job.tags for tag in set(job.tags)
        ]
        try:
            if copy:
                self._copy_rows(conn, [row for _, row in rows], tag_rows)
            elif self._d.is_sqlite:
                conn.exec_driver_sql(
                    _sqlite_job_insert(), _sqlite_params(conn, [r for _, r in rows])
                )
                for part in chunks(tag_rows, 2000):
                    conn.execute(sa.insert(T), list(part))
            else:
                for part in chunks([row for _, row in rows], 1000):
                    conn.execute(sa.insert(J), list(part))
                for part in chunks(tag_rows, 2000):
                    conn.execute(sa.insert(T), list(part))
        except sa.exc.IntegrityError as exc:
            raise DuplicateJobError(
                f"bulk_insert: a job id or idempotency key already exists ({exc.orig})"
            ) from exc
        return len(rows)

    def _copy_rows(
        self, conn: sa.Connection, rows: list[tuple[Any, ...]], tag_rows: list[dict[str, Any]]
    ) -> None:
        """PostgreSQL + psycopg: the rows (``job_values`` tuples) go with COPY on the
        transaction's own connection (several times faster than a multi-row INSERT). Driver
        errors are raised as SQLAlchemy's, like every other statement of the store."""
        driver: Any = conn.connection.driver_connection
        # A column that is NULL in every row is left out of the COPY: the database writes NULL
        # there itself, and each row is a third of the values to format (new jobs leave most
        # columns empty). Only columns without a server default qualify (see _NULL_BY_DEFAULT).
        columns = list(zip(*rows, strict=True))
        count = len(rows)
        kept = [
            index
            for index, values in enumerate(columns)
            if index not in _NULL_BY_DEFAULT or values.count(None) != count
        ]
        if len(kept) < len(columns):
            rows = list(zip(*(columns[index] for index in kept), strict=True))
        sql = f"COPY {J.name} ({', '.join(JOB_FIELDS[index] for index in kept)}) FROM STDIN"
        try:
            with driver.cursor() as cursor:
                # Datetimes go as they are (aware UTC, checked by job_values): PostgreSQL reads
                # a literal for a `timestamp without time zone` column ignoring its offset,
                # which for UTC values is exactly the naive UTC the schema stores.
                with cursor.copy(sql) as copy:
                    write = copy.write_row
                    for row in rows:
                        write(row)
                if tag_rows:
                    with cursor.copy(f"COPY {T.name} (job_id, tag) FROM STDIN") as copy:
                        for tag in tag_rows:
                            copy.write_row((tag["job_id"], tag["tag"]))
        except self._engine.dialect.loaded_dbapi.Error as exc:
            raise sa.exc.DBAPIError.instance(
                sql, None, exc, self._engine.dialect.loaded_dbapi.Error
            ) from exc

    @retry_conflicts
    def reset_orphan_jobs(self, node_ids: Sequence[str], heartbeat_before: datetime) -> int:
        require_utc(heartbeat_before, "heartbeat_before")
        if not node_ids:
            return 0
        now = self._d.now()
        N = s.nodes
        # The liveness checks are part of the UPDATE itself: a node that heartbeat again, or a
        # job claimed/touched after the cutoff, is never reset (a claim committed concurrently
        # is re-checked on the row's newest version by every backend's UPDATE).
        alive = sa.exists().where(N.c.node_id == J.c.owner, N.c.last_heartbeat >= heartbeat_before)
        count = 0
        with self._write("reset_orphan_jobs") as conn:
            for part in chunks(list(node_ids)):
                stmt = (
                    sa.update(J)
                    .where(
                        J.c.owner.in_(part),
                        J.c.status == RUNNING,
                        sa.or_(J.c.heartbeat_at.is_(None), J.c.heartbeat_at < heartbeat_before),
                        ~alive,
                    )
                    .values(
                        status=PENDING,
                        owner=None,
                        scheduled_at=now,
                        updated_at=now,
                        # a claim that never started gives its attempt back
                        attempt=sa.case(
                            (
                                sa.and_(J.c.dispatched_at.is_(None), J.c.attempt > 0),
                                J.c.attempt - 1,
                            ),
                            else_=J.c.attempt,
                        ),
                        dispatched_at=None,
                    )
                )
                count += conn.execute(stmt).rowcount
        return count

    def find_stale_running_jobs(self, heartbeat_before: datetime, limit: int) -> list[JobEntity]:
        require_utc(heartbeat_before, "heartbeat_before")
        stmt = (
            sa.select(J)
            .where(J.c.status == RUNNING, J.c.heartbeat_at < heartbeat_before)
            .order_by(J.c.heartbeat_at, J.c.id)
            .limit(limit)
        )
        with self._read("find_stale_running_jobs") as conn:
            return self._select_jobs(conn, stmt)

    def touch_running_jobs(self, node_id: str, job_ids: Sequence[UUID]) -> int:
        if not job_ids:
            return 0
        count = 0
        with self._write("touch_running_jobs") as conn:
            for part in chunks(list(job_ids)):
                stmt = (
                    sa.update(J)
                    .where(
                        J.c.id.in_(part),
                        self._d.unindexed(J.c.owner) == node_id,
                        self._d.unindexed(J.c.status) == RUNNING,
                    )
                    .values(heartbeat_at=self._d.now())
                )
                count += conn.execute(stmt).rowcount
        return count

    def delete_dead_letter_older_than(self, cutoff: datetime, limit: int) -> int:
        require_utc(cutoff, "cutoff")
        if limit <= 0:
            return 0
        with self._write("delete_dead_letter_older_than") as conn:
            ids = list(
                conn.execute(
                    sa.select(J.c.id)
                    .where(J.c.status == JobStatus.FAILED.value, J.c.finished_at < cutoff)
                    .order_by(J.c.finished_at)
                    .limit(limit)
                ).scalars()
            )
            count = 0
            for part in chunks(ids):
                for table in (T, s.job_properties, s.job_state, s.executions, s.job_logs):
                    conn.execute(sa.delete(table).where(table.c.job_id.in_(part)))
                count += conn.execute(
                    sa.delete(J).where(J.c.id.in_(part), J.c.status == JobStatus.FAILED.value)
                ).rowcount
            return count

    # ------------------------------------------------------------------ nodes

    def server_now(self) -> datetime:
        with self._read("server_now") as conn:
            value = conn.execute(sa.select(self._d.now())).scalar_one()
        assert isinstance(value, datetime)
        return value

    def upsert_heartbeat(self, node: NodeEntity) -> None:
        values = node_to_row(node)
        now = self._d.now()
        values["last_heartbeat"] = now
        update = {k: v for k, v in values.items() if k not in ("node_id", "started_at")}
        with self._independent("upsert_heartbeat") as conn:
            conn.execute(self._d.upsert(s.nodes, values, ["node_id"], update))

    def find_inactive_nodes(self, timeout: timedelta) -> list[NodeEntity]:
        cutoff = self._d.now_plus(-_seconds(timeout, "timeout"))
        with self._read("find_inactive_nodes") as conn:
            rows = conn.execute(
                sa.select(s.nodes)
                .where(s.nodes.c.last_heartbeat < cutoff)
                .order_by(s.nodes.c.node_id)
            ).mappings()
            return [row_to_node(r) for r in rows]

    def find_all_nodes(self) -> list[NodeEntity]:
        with self._read("find_all_nodes") as conn:
            rows = conn.execute(sa.select(s.nodes).order_by(s.nodes.c.node_id)).mappings()
            return [row_to_node(r) for r in rows]

    @retry_conflicts
    def delete_inactive_nodes(self, timeout: timedelta) -> int:
        cutoff = self._d.now_plus(-_seconds(timeout, "timeout"))
        with self._independent("delete_inactive_nodes") as conn:
            return int(
                conn.execute(sa.delete(s.nodes).where(s.nodes.c.last_heartbeat < cutoff)).rowcount
            )

    @retry_conflicts
    def delete_nodes_by_ids(self, node_ids: Sequence[str]) -> int:
        if not node_ids:
            return 0
        count = 0
        with self._independent("delete_nodes_by_ids") as conn:
            for part in chunks(list(node_ids)):
                count += conn.execute(
                    sa.delete(s.nodes).where(s.nodes.c.node_id.in_(part))
                ).rowcount
        return count

    # ------------------------------------------------------------------ tags

    def insert_tags(self, job_id: UUID, tags: Sequence[str]) -> None:
        _check_tags(tags, job_id)
        if not tags:
            with self._read("insert_tags") as conn:
                if conn.execute(sa.select(J.c.id).where(J.c.id == job_id)).first() is None:
                    raise JobNotFoundError(job_id)
            return
        with self._write("insert_tags") as conn:
            if conn.execute(sa.select(J.c.id).where(J.c.id == job_id)).first() is None:
                raise JobNotFoundError(job_id)
            conn.execute(
                self._d.insert_ignore(T), [{"job_id": job_id, "tag": t} for t in sorted(set(tags))]
            )

    def delete_tags_by_job_id(self, job_id: UUID) -> int:
        with self._write("delete_tags_by_job_id") as conn:
            return int(conn.execute(sa.delete(T).where(T.c.job_id == job_id)).rowcount)

    def find_tags(self, job_id: UUID) -> list[str]:
        with self._read("find_tags") as conn:
            return sorted(conn.execute(sa.select(T.c.tag).where(T.c.job_id == job_id)).scalars())


__all__ = ["JobOperations"]
