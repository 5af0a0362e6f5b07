"""The interface every backend implements, and what the backends share.

A ``Dialect`` is chosen once, when the store is built (``dialect_for``), and holds everything
that differs per database: the clock, upserts and insert-or-ignore, and the store's hot
statements (claim, started marks, batched completions, insert and bulk insert). The store's
methods call it and never test which database they run on; each backend is one module of this
package, and only the module of the backend in use is imported.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar
from uuid import UUID

import attrs
import sqlalchemy as sa

from ratchet_api.errors import DuplicateJobError, StoreDataError
from ratchet_api.model import JobStatus, NodeTagFilter
from ratchet_api.store.entities import (
    MAX_TAG_LENGTH,
    Completion,
    ExecutionRecord,
    FailedClaim,
    FailureWrite,
    JobEntity,
)
from ratchet_store_sql import schema as s
from ratchet_store_sql._convert import execution_to_row, job_to_row, row_to_job
from ratchet_store_sql._types import UtcDateTime

if TYPE_CHECKING:
    from ratchet_store_sql._base import SqlBase

J = s.jobs
T = s.job_tags
PENDING = JobStatus.PENDING.value
RUNNING = JobStatus.RUNNING.value
UTC_TYPE = UtcDateTime()

CHUNK = 500
"""Most ids bound into one IN list (keeps every backend under its parameter limit)."""


def chunks(items: Sequence[Any], size: int = CHUNK) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def check_tags(tags: Sequence[str], job_id: UUID | None = None) -> None:
    for tag in tags:
        if not isinstance(tag, str) or not tag:
            raise StoreDataError("tags", f"every tag must be a non-empty string, got {tag!r}")
        if len(tag) > MAX_TAG_LENGTH:
            raise StoreDataError(
                "tags",
                f"tag {tag[:20]!r}... is {len(tag)} characters, the limit is {MAX_TAG_LENGTH}",
                job_id=job_id,
            )


def duplicate_error(job: JobEntity, exc: sa.exc.IntegrityError) -> DuplicateJobError:
    """The error for an insert of ``job`` that met an existing id or idempotency key."""
    text = str(exc.orig).lower()
    if job.idempotency_key is not None and "idempotency" in text:
        return DuplicateJobError(
            f"a job with idempotency key {job.idempotency_key!r} was inserted concurrently"
        )
    return DuplicateJobError(f"job {job.id} already exists")


def claim_filter(
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


def claim_values(owner: Any) -> dict[str, Any]:
    """What a claim writes besides its timestamps (``owner``: the node, or its parameter)."""
    return {
        "status": RUNNING,
        "owner": owner,
        "attempt": J.c.attempt + 1,
        "claim_seq": J.c.claim_seq + 1,
        "dispatched_at": None,
    }


def claim_order() -> tuple[sa.ColumnElement[Any], ...]:
    """The order jobs are claimed in (the claim index's order)."""
    return (J.c.priority.desc(), J.c.scheduled_at, J.c.id)


FAIR_PROBE_SECONDS = 1.0
"""How long a claim trusts its last look at whether any PENDING job has a fairness key (this
store's own keyed inserts are seen at once)."""


def claim_pick(
    now: sa.ColumnElement[datetime],
    execution_targets: Sequence[str] | None,
    tag_filter: NodeTagFilter | None,
    *,
    marking: bool,
    limit: Any,
) -> sa.Select[Any]:
    """The plain claim's pick in claim order: the ids (with ``priority`` and
    ``scheduled_at`` for a claim that marks its first jobs)."""
    columns = (J.c.id, J.c.priority, J.c.scheduled_at) if marking else (J.c.id,)
    return (
        sa.select(*columns)
        .where(*claim_filter(now, execution_targets, tag_filter))
        .order_by(*claim_order())
        .limit(limit)
    )


# The fairness keys of PENDING jobs, one index probe per key (a loose index scan through
# ix_ratchet_jobs_fair_claim: PostgreSQL and SQLite do not skip-scan a DISTINCT on their own).
_FAIR_KEYS = """WITH RECURSIVE fair_keys(k) AS (
  SELECT (SELECT fairness_key FROM ratchet_jobs{hint}
          WHERE status = 'PENDING' AND fairness_key IS NOT NULL
          ORDER BY fairness_key LIMIT 1)
  UNION ALL
  SELECT (SELECT fairness_key FROM ratchet_jobs{hint}
          WHERE status = 'PENDING' AND fairness_key > fair_keys.k
          ORDER BY fairness_key LIMIT 1)
  FROM fair_keys WHERE fair_keys.k IS NOT NULL
)
SELECT k FROM fair_keys WHERE k IS NOT NULL"""
_FROM_JOBS = re.compile(r"FROM ratchet_jobs\b")
_HINTED: dict[Any, Any] = {}
"""Hinted candidate statements (SQLite) by keys, filter and limit."""
FAIR_KEYS_PER_STATEMENT = 64
"""Per-key branches of one candidate statement (a ``UNION ALL``)."""


def fair_candidates(
    conn: sa.Connection,
    now: sa.ColumnElement[datetime],
    limit: int,
    execution_targets: Sequence[str] | None,
    tag_filter: NodeTagFilter | None,
    *,
    index_hint: str = "",
    keys: Sequence[str] | None = None,
) -> list[UUID]:
    """The ids a fair claim of ``limit`` jobs takes, best first (``FairClaimStore``), and as
    many again behind them for a claimer that finds some taken.

    Only each group's first ``limit`` due jobs can be among them: they are read per group
    (every fairness key of a PENDING job, and the unkeyed group), each group a short range of
    ``ix_ratchet_jobs_fair_claim`` in claim order, so a claim reads about ``keys x limit``
    rows however long one key's backlog is. The RUNNING jobs per key (a handful) are counted
    and the candidates ranked as ``ratchet_api.store.fairness.fair_claim_order`` does.
    ``index_hint`` (SQLite: ``INDEXED BY ...``) names the index for a planner without
    statistics, which prefers the claim index's equality on status and scans the backlog.
    ``keys``: the fairness keys of PENDING jobs when the dialect reads them itself (else one
    recursive statement reads them)."""
    if keys is None:
        keys_sql = _FAIR_KEYS.format(hint=f" {index_hint}" if index_hint else "")
        keys = list(conn.execute(sa.text(keys_sql)).scalars())
    groups: list[str | None] = [*keys, None]
    where = claim_filter(now, execution_targets, tag_filter)
    columns = (J.c.id, J.c.priority, J.c.scheduled_at, J.c.fairness_key)
    found: list[Any] = []
    for part in chunks(groups, FAIR_KEYS_PER_STATEMENT):
        branches = [
            sa.select(
                sa.select(*columns)
                .where(
                    *where, J.c.fairness_key.is_(None) if key is None else J.c.fairness_key == key
                )
                .order_by(*claim_order())
                .limit(limit)
                .subquery()
            )
            for key in part
        ]
        statement: Any = branches[0] if len(branches) == 1 else sa.union_all(*branches)
        if index_hint:
            # the statement as text with the hint after each branch's FROM (values inlined:
            # the partial index's `status = 'PENDING'` must appear as a literal), kept per
            # keys and filter: compiling it costs more than running it
            cache_key = (
                index_hint,
                tuple(part),
                None if execution_targets is None else tuple(execution_targets),
                None if tag_filter is None else (tag_filter.required, tag_filter.excluded),
                limit,
            )
            cached = _HINTED.get(cache_key)
            if cached is None:
                compiled = statement.compile(
                    dialect=conn.dialect, compile_kwargs={"literal_binds": True}
                )
                hinted = _FROM_JOBS.sub(f"FROM ratchet_jobs {index_hint}", str(compiled))
                cached = sa.text(hinted).columns(*columns)  # typed: ids and stamps converted
                if len(_HINTED) >= 256:
                    _HINTED.clear()
                _HINTED[cache_key] = cached
            statement = cached
        found.extend(conn.execute(statement).all())
    if not found:
        return []
    running: dict[str, int] = dict(
        conn.execute(
            sa.select(J.c.fairness_key, sa.func.count())
            .where(
                J.c.status == RUNNING,
                J.c.heartbeat_at.is_not(None),  # every claimed job has one: the partial index
                J.c.fairness_key.is_not(None),
            )
            .group_by(J.c.fairness_key)
        ).all()
    )
    found.sort(key=lambda r: (-int(r[1]), r[2], r[0]))
    seen: dict[tuple[int, str | None], int] = {}
    ranked: list[tuple[int, int, Any, UUID]] = []
    for job_id, priority, scheduled_at, key in found:
        group = (int(priority), key)
        rank = seen.get(group, 0) + 1
        seen[group] = rank
        if key is not None:
            rank += int(running.get(key, 0))
        ranked.append((-int(priority), rank, scheduled_at, job_id))
    ranked.sort()
    return [r[3] for r in ranked[: 2 * limit]]


def succeeded_values(part: Sequence[Completion], now: Any) -> dict[str, Any]:
    """The columns a batched success writes (one literal result when all are equal)."""
    results = {c.result for c in part}
    result: Any
    if len(results) == 1:
        result = next(iter(results))
    else:
        result = sa.case({c.job_id: c.result for c in part}, value=J.c.id)
    return {
        "status": JobStatus.SUCCEEDED.value,
        "result": result,
        "finished_at": now,
        "updated_at": now,
        "owner": None,
    }


def per_job(part: Sequence[FailedClaim], value: Callable[[FailedClaim], Any], type_: Any) -> Any:
    """The value of each job of ``part`` for one column: a literal when all are equal, else a
    ``CASE`` on the job id."""
    values = {value(f) for f in part}
    if len(values) == 1:
        return sa.literal(next(iter(values)), type_)
    return sa.case({f.job_id: sa.literal(value(f), type_) for f in part}, value=J.c.id)


def count_per_batch(done: Sequence[tuple[UUID, UUID | None]]) -> dict[UUID, int]:
    per_batch: dict[UUID, int] = {}
    for _, batch_id in done:
        if batch_id is not None:
            per_batch[batch_id] = per_batch.get(batch_id, 0) + 1
    return per_batch


def tagged(job: JobEntity) -> JobEntity:
    """``job`` with its tags as stored: distinct and sorted."""
    tags = (*sorted(set(job.tags)),)
    return job if job.tags == tags else attrs.evolve(job, tags=tags)


class Dialect:
    """What the store needs to know about one backend, and the statements it runs there.

    Subclasses implement the clock (``now_plus``, ``seconds_between``), the conflict forms
    (``insert_ignore``, ``upsert``, ``upsert_many``) and the hot statements (``claim``,
    ``dispatch_chunk``, ``succeed_chunk``, ``insert_rows``); ``insert_job``,
    ``mark_dispatched`` and ``save_executions`` have portable defaults a backend may replace
    by a faster path of its own.
    """

    name: ClassVar[str]
    is_pg: ClassVar[bool] = False
    is_mysql: ClassVar[bool] = False
    is_sqlite: ClassVar[bool] = False
    returning: bool = False
    """``UPDATE ... RETURNING`` / ``INSERT ... RETURNING`` are available."""
    fair_index_hint: ClassVar[str] = ""
    """What the fair claim's reads name after ``FROM ratchet_jobs`` (SQLite: ``INDEXED BY``)."""
    autocommit_statements: ClassVar[bool] = False
    """A write that is one statement runs in autocommit (``SqlBase._write_statement``)."""
    immediate_writes: ClassVar[bool] = False
    """A write transaction takes the database's write lock at BEGIN (SQLite)."""
    execution_key: ClassVar[tuple[str, ...]] = ("id",)
    """The unique key an execution record is upserted on (PostgreSQL: ``(id, started_at)``,
    the key of its partitioned ``ratchet_executions``, migration 0013)."""

    def __init__(self, engine: sa.Engine, *, load_tags_on_claim: bool = True) -> None:
        self.engine = engine
        self.load_tags_on_claim = load_tags_on_claim
        self._keyed = False
        self._keyed_seen = -FAIR_PROBE_SECONDS

    def note_keyed(self, jobs: Iterable[JobEntity]) -> None:
        """This store writes ``jobs``: a keyed one makes the next claims fair at once."""
        if any(job.fairness_key is not None for job in jobs):
            self._keyed, self._keyed_seen = True, time.monotonic()

    def fair_claims_needed(self, conn: sa.Connection) -> bool:
        """Whether a claim should interleave fairness keys: some PENDING job has a key (an
        index probe on ``(status, fairness_key)``, repeated at most every
        ``FAIR_PROBE_SECONDS``). A queue without keyed jobs keeps the plain claim."""
        clock = time.monotonic()
        if clock - self._keyed_seen >= FAIR_PROBE_SECONDS:
            probe = sa.select(
                sa.exists().where(J.c.status == PENDING, J.c.fairness_key.is_not(None))
            )
            self._keyed, self._keyed_seen = bool(conn.execute(probe).scalar()), clock
        return self._keyed

    # ------------------------------------------------------------------ portable forms

    def unindexed(self, column: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
        """A text ``column`` in a form no index serves, for the other conditions of a write
        that names its jobs by id (the fence's ``status = 'RUNNING'``, ``owner = node``).
        The column itself, except where the planner needs steering (PostgreSQL)."""
        return column

    def now(self) -> sa.ColumnElement[datetime]:
        """The database clock as naive UTC with the finest precision it has."""
        return self.now_plus(0.0)

    def now_plus(self, seconds: float) -> sa.ColumnElement[datetime]:
        """The database clock shifted by ``seconds`` (negative: in the past)."""
        raise NotImplementedError

    def seconds_between(
        self, start: sa.ColumnElement[Any], end: sa.ColumnElement[Any]
    ) -> sa.ColumnElement[float]:
        """``end - start`` in seconds (float)."""
        raise NotImplementedError

    def insert_ignore(self, table: sa.Table) -> Any:
        """INSERT that silently skips rows colliding with a primary or unique key."""
        raise NotImplementedError

    def insert_ignored_count(self, conn: sa.Connection, stmt: Any, table: sa.Table) -> int:
        """Execute an ``insert_ignore`` statement; the number of rows it really inserted.
        (psycopg reports no rowcount for INSERT through SQLAlchemy 2.1: use RETURNING.)"""
        if self.returning:
            return len(conn.execute(stmt.returning(*table.primary_key.columns)).all())
        return int(conn.execute(stmt).rowcount)

    def upsert(
        self,
        table: sa.Table,
        values: Mapping[str, Any],
        keys: Sequence[str],
        update: Mapping[str, Any],
    ) -> Any:
        """INSERT ``values``; on a key collision apply ``update`` instead."""
        raise NotImplementedError

    def upsert_many(self, table: sa.Table, keys: Sequence[str], columns: Sequence[str]) -> Any:
        """INSERT for executemany (one parameter dict per row); on a key collision the row's
        ``columns`` overwrite the stored ones."""
        raise NotImplementedError

    # ------------------------------------------------------------------ hot statements

    def claim(
        self,
        conn: sa.Connection,
        node_id: str,
        limit: int,
        execution_targets: Sequence[str] | None,
        tag_filter: NodeTagFilter | None,
        *,
        start: int = 0,
    ) -> list[JobEntity]:
        """Claim up to ``limit`` due jobs for ``node_id`` on ``conn`` (in claim order or not:
        the store sorts them); the first ``start`` of them in claim order are marked started
        (``dispatched_at`` = the claim's now) by the same statement."""
        raise NotImplementedError

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
        """:meth:`claim` as a single statement straight on the driver, outside any caller's
        transaction; None where the dialect has no such path for this claim (the caller then
        runs :meth:`claim` on a connection of its own)."""
        return None

    def mark_dispatched(self, store: SqlBase, pairs: Sequence[tuple[UUID, int]]) -> set[UUID]:
        """Started marks for ``(job id, claim sequence)`` pairs; the ids still claimed."""
        applied: set[UUID] = set()
        write = store._write_statement if len(pairs) <= CHUNK else store._write
        with write("mark_dispatched") as conn:
            for part in chunks(pairs):
                applied |= self.dispatch_chunk(conn, part)
        return applied

    def dispatch_chunk(self, conn: sa.Connection, part: Sequence[tuple[UUID, int]]) -> set[UUID]:
        """The started marks of one chunk (at most ``CHUNK`` pairs) on ``conn``."""
        raise NotImplementedError

    def succeed_chunk(
        self, conn: sa.Connection, part: Sequence[Completion], now: sa.ColumnElement[datetime]
    ) -> set[UUID]:
        """Fenced successes of one chunk on ``conn``, their batches counted; the ids written."""
        raise NotImplementedError

    def succeed_alone(self, store: SqlBase, part: Sequence[Completion]) -> set[UUID] | None:
        """Fenced successes of one chunk as a single statement straight on the driver, outside
        any caller's transaction: the ids written; None where the dialect has no such path
        (the caller then uses :meth:`succeed_chunk`)."""
        return None

    def fail_chunk(
        self, conn: sa.Connection, part: Sequence[FailedClaim], now: sa.ColumnElement[datetime]
    ) -> set[UUID]:
        """Fenced failure writes of one chunk (at most ``CHUNK``, one per job) on ``conn``, in
        the caller's transaction: the current claims locked and read with their batches, then
        one UPDATE per kind (values per job by ``CASE``), then the dead letters counted in
        their batches. The ids written."""
        fence = self.running_claims([(f.job_id, f.claim_seq) for f in part])
        locked = dict(
            conn.execute(sa.select(J.c.id, J.c.batch_id).where(fence).with_for_update()).all()
        )
        retries = [f for f in part if f.job_id in locked and f.kind is FailureWrite.RETRY]
        dead = [f for f in part if f.job_id in locked and f.kind is FailureWrite.DEAD_LETTER]
        if retries:
            conn.execute(
                sa.update(J)
                .where(J.c.id.in_([f.job_id for f in retries]))
                .values(
                    status=PENDING,
                    owner=None,
                    updated_at=now,
                    scheduled_at=per_job(retries, lambda f: f.run_at, UTC_TYPE),
                    last_error=per_job(retries, lambda f: f.error, sa.Text()),
                )
            )
        if dead:
            conn.execute(
                sa.update(J)
                .where(J.c.id.in_([f.job_id for f in dead]))
                .values(
                    status=JobStatus.FAILED.value,
                    owner=None,
                    updated_at=now,
                    finished_at=now,
                    last_error=per_job(dead, lambda f: f.error, sa.Text()),
                )
            )
            failed: dict[UUID, int] = {}
            for f in dead:
                batch_id = locked[f.job_id]
                if batch_id is not None:
                    failed[batch_id] = failed.get(batch_id, 0) + 1
            b = s.batches
            for batch_id, count in sorted(failed.items()):
                conn.execute(
                    sa.update(b).where(b.c.id == batch_id).values(failed=b.c.failed + count)
                )
        return set(locked)

    def insert_job(self, store: SqlBase, job: JobEntity) -> JobEntity:
        """Insert one job (and its tags, checked by the caller) in a transaction of its own,
        or in the joined one; an existing idempotency key returns the stored job instead. The
        job is converted (and so checked) before anything is sent."""
        row = job_to_row(job)
        with store._write("insert_job") as conn:
            if job.idempotency_key is not None:
                existing = store._find_one(conn, J.c.idempotency_key == job.idempotency_key)
                if existing is not None:
                    return existing
            try:
                conn.execute(sa.insert(J), [row])
            except sa.exc.IntegrityError as exc:
                raise duplicate_error(job, exc) from exc
            if job.tags:
                conn.execute(sa.insert(T), [{"job_id": job.id, "tag": t} for t in set(job.tags)])
        return tagged(job)

    def bulk_row(self, job: JobEntity) -> Any:
        """``job`` in the form ``insert_rows`` takes (checked as an insert checks it)."""
        return job_to_row(job)

    def insert_rows(
        self, conn: sa.Connection, rows: list[Any], tag_rows: list[dict[str, Any]]
    ) -> None:
        """Write ``rows`` (from ``bulk_row``) and ``tag_rows`` on the caller's connection."""
        for part in chunks(rows, 1000):
            conn.execute(sa.insert(J), list(part))
        for part in chunks(tag_rows, 2000):
            conn.execute(sa.insert(T), list(part))

    def close(self) -> None:
        """Release what the dialect holds of its own (the store is closing)."""

    streams_parts = False
    """Whether ``insert_parts`` writes parts as they come (``bulk_insert_parts`` otherwise
    reads every part before it opens the transaction)."""

    def insert_parts(
        self,
        conn: sa.Connection,
        parts: Iterable[Sequence[JobEntity]],
        insert_jobs: Callable[[sa.Connection, Sequence[JobEntity]], int],
    ) -> int:
        """``bulk_insert_parts`` on ``conn`` writing each part as it comes, for a dialect with
        ``streams_parts`` (the store reads every part first for the others); ``insert_jobs``
        is the store's checked bulk insert on ``conn``."""
        raise NotImplementedError

    def after_bulk_insert(self, store: SqlBase, inserted: int) -> None:
        """Called after a bulk insert of ``inserted`` rows committed on a connection of the
        store's own (not in a joined transaction)."""

    def save_executions(self, store: SqlBase, records: Sequence[ExecutionRecord]) -> None:
        """Upsert execution records by id."""
        rows = [execution_to_row(r) for r in records]
        stmt = self.upsert_many(
            s.executions, list(self.execution_key), [k for k in rows[0] if k != "id"]
        )
        with store._write("save_executions") as conn:
            conn.execute(stmt, rows)

    # ------------------------------------------------------------------ shared forms

    def running_claims(self, pairs: Sequence[tuple[UUID, int]]) -> sa.ColumnElement[bool]:
        """The fence of a write by (job id, claim sequence): the job is still RUNNING under
        that claim. The ids come first so that the primary key is the way in."""
        return sa.and_(
            J.c.id.in_([job_id for job_id, _ in pairs]),
            sa.tuple_(J.c.id, J.c.claim_seq).in_(list(pairs)),
            self.unindexed(J.c.status) == RUNNING,
        )

    def jobs_with_tags(self, conn: sa.Connection, rows: Sequence[Any]) -> list[JobEntity]:
        """Claimed rows as entities, with their tags read in one more query when the store
        loads tags on claim."""
        if not rows:
            return []
        if self.load_tags_on_claim:
            tags = tags_for(conn, [r["id"] for r in rows])
            return [row_to_job(r, tags.get(r["id"], ())) for r in rows]
        return [row_to_job(r) for r in rows]


class OnConflictForms:
    """The conflict forms of the backends with ``INSERT ... ON CONFLICT`` (SQLite,
    PostgreSQL), written once: each backend names only its SQLAlchemy dialect's insert
    construct (:meth:`conflict_insert`), so this module imports no backend's dialect."""

    def conflict_insert(self, table: sa.Table) -> Any:
        """The backend dialect's ``insert(table)`` (it has ``on_conflict_do_*``)."""
        raise NotImplementedError

    def insert_ignore(self, table: sa.Table) -> Any:
        return self.conflict_insert(table).on_conflict_do_nothing()

    def upsert(
        self,
        table: sa.Table,
        values: Mapping[str, Any],
        keys: Sequence[str],
        update: Mapping[str, Any],
    ) -> Any:
        stmt = self.conflict_insert(table).values(**values)
        return stmt.on_conflict_do_update(index_elements=list(keys), set_=dict(update))

    def upsert_many(self, table: sa.Table, keys: Sequence[str], columns: Sequence[str]) -> Any:
        stmt = self.conflict_insert(table)
        return stmt.on_conflict_do_update(
            index_elements=list(keys), set_={c: stmt.excluded[c] for c in columns}
        )


def claim_params(node_id: str, limit: int, start: int) -> dict[str, Any]:
    """The parameters of a claim statement (``ReturningClaim.claim_statement``)."""
    params: dict[str, Any] = {"_claim_node": node_id, "_claim_limit": limit}
    if start > 0:
        params["_claim_start"] = min(start, limit)
    return params


class ReturningClaim(Dialect):
    """The claim as one ``UPDATE ... RETURNING`` (PostgreSQL, SQLite), with the node and the
    limit as parameters: built once per filter and kept (building it cost about a fifth of a
    claim's client CPU)."""

    returning = True
    tags_in_claim: ClassVar[bool] = False
    """The claimed rows' tags come back with them (an aggregate in the same statement)."""

    def __init__(self, engine: sa.Engine, *, load_tags_on_claim: bool = True) -> None:
        super().__init__(engine, load_tags_on_claim=load_tags_on_claim)
        self._claim_statements: dict[Any, Any] = {}

    def claim_target(self, pick: sa.Select[Any]) -> sa.ColumnElement[bool]:
        """The ``WHERE`` of the claim's UPDATE naming the picked rows."""
        raise NotImplementedError

    def claim_commit_conditions(self) -> tuple[sa.ColumnElement[bool], ...]:
        """Conditions added to the claim's ``WHERE`` that hold for every row and set how its
        transaction commits (PostgreSQL's asynchronous claim commit); none by default."""
        return ()

    def picked_rows(self, pick: sa.Select[Any]) -> Any:
        """The picked rows (``pick`` selects id, priority and scheduled_at in claim order) as
        a CTE read twice by a claim that marks its first jobs started: once for the rows to
        claim, once for the first of them. Locked by the backends that lock rows."""
        return pick.cte("picked")

    def claim_statement(
        self,
        execution_targets: Sequence[str] | None,
        tag_filter: NodeTagFilter | None,
        with_tags: bool,
        marking: bool,
    ) -> Any:
        """The claim statement for these filters, built once and kept (up to 64 variants)."""
        key = (
            None if execution_targets is None else tuple(execution_targets),
            None if tag_filter is None else (tag_filter.required, tag_filter.excluded),
            marking,
        )
        stmt = self._claim_statements.get(key)
        if stmt is None:
            stmt = self._claim_statement(execution_targets, tag_filter, with_tags, marking)
            if len(self._claim_statements) < 64:
                self._claim_statements[key] = stmt
        return stmt

    def _claim_statement(
        self,
        execution_targets: Sequence[str] | None,
        tag_filter: NodeTagFilter | None,
        with_tags: bool,
        marking: bool = False,
    ) -> Any:
        now = self.now()
        pick = claim_pick(
            now,
            execution_targets,
            tag_filter,
            marking=marking,
            limit=sa.bindparam("_claim_limit", type_=sa.Integer()),
        )
        returned: list[Any] = list(J.c)
        if with_tags:
            # the tags come back with the claimed rows: no second round trip
            returned.append(
                sa.select(sa.func.array_agg(T.c.tag))
                .where(T.c.job_id == J.c.id)
                .scalar_subquery()
                .label("_tags")
            )
        values = claim_values(sa.bindparam("_claim_node", type_=J.c.owner.type))
        if marking:
            # The first `_claim_start` picked rows in claim order are marked started by the
            # claim itself (WorkerBatchStore.claim_and_start): the CTE is read twice, so it
            # is computed once, before the update, with its rows locked where rows lock.
            picked = self.picked_rows(pick)
            first = (
                sa.select(picked.c.id)
                .order_by(picked.c.priority.desc(), picked.c.scheduled_at, picked.c.id)
                .limit(sa.bindparam("_claim_start", type_=sa.Integer()))
            )
            values["dispatched_at"] = sa.case((J.c.id.in_(first), now), else_=sa.null())
            target: sa.ColumnElement[bool] = J.c.id.in_(sa.select(picked.c.id))
        else:
            target = self.claim_target(pick)
        return (
            sa.update(J)
            .where(target, *self.claim_commit_conditions())
            .values(started_at=now, heartbeat_at=now, updated_at=now, **values)
            .returning(*returned)
        )

    def claim(
        self,
        conn: sa.Connection,
        node_id: str,
        limit: int,
        execution_targets: Sequence[str] | None,
        tag_filter: NodeTagFilter | None,
        *,
        start: int = 0,
    ) -> list[JobEntity]:
        with_tags = self.tags_in_claim and self.load_tags_on_claim
        marking = start > 0
        if self.fair_claims_needed(conn):
            return self.fair_claim(conn, node_id, limit, execution_targets, tag_filter, start)
        stmt = self.claim_statement(execution_targets, tag_filter, with_tags, marking)
        params = claim_params(node_id, limit, start)
        rows: list[Any] = list(conn.execute(stmt, params).mappings())
        if with_tags:
            return [row_to_job(r, r["_tags"] or ()) for r in rows]
        return self.jobs_with_tags(conn, rows)

    def fair_claim(  # noqa: PLR0917 (the claim's own arguments)
        self,
        conn: sa.Connection,
        node_id: str,
        limit: int,
        execution_targets: Sequence[str] | None,
        tag_filter: NodeTagFilter | None,
        start: int,
    ) -> list[JobEntity]:
        """The fair claim (``fair_candidates``): the best ``limit`` candidates still PENDING
        claimed by one ``UPDATE ... RETURNING`` (``fair_take`` picks them)."""
        now = self.now()
        chosen = fair_candidates(
            conn, now, limit, execution_targets, tag_filter, index_hint=self.fair_index_hint
        )
        if not chosen:
            return []
        values = claim_values(node_id)
        take = self.fair_take(chosen, limit)
        if start > 0:
            # the first `start` in fair order: those of the chosen ids still PENDING (read
            # under the claim's own locks: SQLite's write lock, PostgreSQL's picked rows)
            first = self.fair_first(chosen, start)
            values["dispatched_at"] = sa.case((J.c.id.in_(first), now), else_=sa.null())
        # status in a form no index serves: SQLite otherwise reads the ids' rows through the
        # claim index's status equality, every PENDING job (38 ms at 100,000)
        pending = sa.func.coalesce(J.c.status, J.c.status) == PENDING
        stmt = (
            sa.update(J)
            .where(J.c.id.in_(take), pending)
            .values(started_at=now, heartbeat_at=now, updated_at=now, **values)
            .returning(*J.c)
        )
        return self.jobs_with_tags(conn, list(conn.execute(stmt).mappings()))

    def fair_take(self, chosen: Sequence[UUID], limit: int) -> Any:
        """The ids to claim of ``chosen`` (best first): the first ``limit`` of them."""
        return list(chosen[:limit])

    def fair_first(self, chosen: Sequence[UUID], start: int) -> Any:
        """The ids to mark started: the first ``start`` of them."""
        return list(chosen[:start])


def tags_for(conn: sa.Connection, ids: Sequence[UUID]) -> dict[UUID, list[str]]:
    """The tags of the jobs ``ids``, read in chunks."""
    found: dict[UUID, list[str]] = {}
    for part in chunks(ids):
        rows = conn.execute(sa.select(T.c.job_id, T.c.tag).where(T.c.job_id.in_(part)))
        for job_id, tag in rows:
            found.setdefault(job_id, []).append(tag)
    return found


__all__ = [
    "CHUNK",
    "Dialect",
    "ReturningClaim",
    "check_tags",
    "chunks",
    "claim_filter",
    "claim_order",
    "claim_values",
    "duplicate_error",
    "tagged",
    "tags_for",
]
