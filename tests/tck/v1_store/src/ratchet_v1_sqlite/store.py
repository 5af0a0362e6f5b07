"""A Ratchet store in plain ``sqlite3``, written from the store SPI 1.0 protocol text (the
mandatory sub-protocols of ``ratchet_api.store.protocols`` at the first release) and nothing
else: no capabilities, no version declaration (so it is taken to implement 1.0).

FROZEN: this is what a store author wrote against 1.0. It must keep certifying for 1.0 with
every later TCK and keep running jobs through the engine's compatibility adapter; do not add
the methods of later versions here.

Layout: one table of jobs (datetimes as integer microseconds since the epoch, UTC, so SQL
ordering is time ordering), one of tags, one of nodes. Each thread uses its own connection in
autocommit mode; every write runs in a ``BEGIN IMMEDIATE`` transaction, which takes the
database's write lock first, so a claim is atomic against every other thread and process.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast
from uuid import UUID

from ratchet_api.errors import DuplicateJobError, JobNotFoundError, StoreDataError, StoreError
from ratchet_api.model import JobPriority, JobStatus, JobType, NodeTagFilter
from ratchet_api.store.entities import MAX_TAG_LENGTH, Completion, JobEntity, NodeEntity

C = TypeVar("C")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS v1_jobs (
    id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    priority INTEGER NOT NULL,
    job_type TEXT NOT NULL,
    target TEXT NOT NULL,
    payload TEXT NOT NULL,
    scheduled_at INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    started_at INTEGER,
    finished_at INTEGER,
    attempt INTEGER NOT NULL,
    max_retries INTEGER NOT NULL,
    backoff TEXT,
    claim_seq INTEGER NOT NULL,
    owner TEXT,
    heartbeat_at INTEGER,
    idempotency_key TEXT UNIQUE,
    execution_target TEXT,
    result TEXT,
    last_error TEXT,
    parent_id TEXT,
    batch_id TEXT,
    signal_key TEXT,
    signal_deadline INTEGER,
    signal_payload TEXT,
    resource_key TEXT,
    recurring_name TEXT
);
CREATE INDEX IF NOT EXISTS v1_jobs_claim ON v1_jobs (status, priority, scheduled_at);
CREATE INDEX IF NOT EXISTS v1_jobs_parent ON v1_jobs (parent_id);
CREATE TABLE IF NOT EXISTS v1_tags (
    job_id TEXT NOT NULL,
    tag TEXT NOT NULL,
    PRIMARY KEY (job_id, tag)
);
CREATE TABLE IF NOT EXISTS v1_nodes (
    node_id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started_at INTEGER NOT NULL,
    last_heartbeat INTEGER NOT NULL,
    running_jobs INTEGER NOT NULL,
    tags TEXT NOT NULL
);
"""

_TIME_FIELDS = (
    "scheduled_at",
    "created_at",
    "updated_at",
    "started_at",
    "finished_at",
    "heartbeat_at",
    "signal_deadline",
)
_UUID_FIELDS = ("parent_id", "batch_id")
_COLUMNS = (
    "id",
    "status",
    "priority",
    "job_type",
    "target",
    "payload",
    *_TIME_FIELDS[:5],
    "attempt",
    "max_retries",
    "backoff",
    "claim_seq",
    "owner",
    "heartbeat_at",
    "idempotency_key",
    "execution_target",
    "result",
    "last_error",
    *_UUID_FIELDS,
    "signal_key",
    "signal_deadline",
    "signal_payload",
    "resource_key",
    "recurring_name",
)
_TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def _us(value: datetime, field: str) -> int:
    """``value`` as integer microseconds since the epoch; ``StoreDataError`` naming ``field``
    for a naive or non-UTC datetime."""
    if value.tzinfo is None or value.utcoffset() != timedelta(0):
        raise StoreDataError(field, f"must be timezone-aware UTC, got {value!r}")
    delta = value - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _dt(value: int | None) -> datetime | None:
    if value is None:
        return None
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=value)


def _row_values(job: JobEntity) -> list[Any]:
    values: list[Any] = []
    for column in _COLUMNS:
        value = getattr(job, column)
        if column in _TIME_FIELDS:
            value = None if value is None else _us(value, column)
        elif column == "id" or column in _UUID_FIELDS:
            value = None if value is None else str(value)
        elif column in ("status", "job_type"):
            value = value.value
        elif column == "priority":
            value = int(value)
        values.append(value)
    return values


class V1SqliteStore:
    """The mandatory store SPI 1.0 on a SQLite file (or ``:memory:`` for one thread)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        self._conn().executescript(_SCHEMA)

    def __repr__(self) -> str:
        return f"V1SqliteStore({self._path!r})"

    # ------------------------------------------------------------ plumbing

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise StoreError(f"{self!r} is closed")
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA busy_timeout = 30000")
            conn.execute("PRAGMA journal_mode = WAL")
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot begin a write: {exc}", retryable=True) from exc
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        else:
            conn.execute("COMMIT")

    def _now(self) -> int:
        return _us(datetime.now(UTC), "now")

    def _entity(self, row: sqlite3.Row, conn: sqlite3.Connection) -> JobEntity:
        fields: dict[str, Any] = {}
        for column in _COLUMNS:
            value = row[column]
            if column in _TIME_FIELDS:
                value = _dt(value)
            elif column == "id" or column in _UUID_FIELDS:
                value = None if value is None else UUID(value)
            elif column == "status":
                value = JobStatus(value)
            elif column == "job_type":
                value = JobType(value)
            elif column == "priority":
                value = JobPriority(value)
            fields[column] = value
        tags = conn.execute(
            "SELECT tag FROM v1_tags WHERE job_id = ? ORDER BY tag", (row["id"],)
        ).fetchall()
        fields["tags"] = tuple(t["tag"] for t in tags)
        return JobEntity(**fields)

    def _select(self, conn: sqlite3.Connection, where: str, args: Sequence[Any]) -> list[JobEntity]:
        rows = conn.execute(f"SELECT * FROM v1_jobs WHERE {where}", args).fetchall()
        return [self._entity(r, conn) for r in rows]

    def _insert(self, conn: sqlite3.Connection, job: JobEntity) -> bool:
        """False when the idempotency key exists; DuplicateJobError when the id does."""
        for tag in job.tags:
            if len(tag) > MAX_TAG_LENGTH:
                raise StoreDataError(
                    "tags", f"tag is {len(tag)} characters, the limit is {MAX_TAG_LENGTH}"
                )
        values = _row_values(job)  # validates the datetimes before anything is written
        if job.idempotency_key is not None:
            found = conn.execute(
                "SELECT 1 FROM v1_jobs WHERE idempotency_key = ?", (job.idempotency_key,)
            ).fetchone()
            if found:
                return False
        if conn.execute("SELECT 1 FROM v1_jobs WHERE id = ?", (str(job.id),)).fetchone():
            raise DuplicateJobError(f"job {job.id} already exists")
        marks = ", ".join("?" for _ in _COLUMNS)
        conn.execute(f"INSERT INTO v1_jobs ({', '.join(_COLUMNS)}) VALUES ({marks})", values)
        conn.executemany(
            "INSERT OR IGNORE INTO v1_tags (job_id, tag) VALUES (?, ?)",
            [(str(job.id), t) for t in job.tags],
        )
        return True

    # ------------------------------------------------------------ JobStore

    def capability(self, kind: Callable[..., C]) -> C | None:
        return cast(C, self) if isinstance(self, cast(type, kind)) else None

    def joined(self, transaction: object) -> V1SqliteStore:
        raise StoreError(
            f"{self!r} cannot join a caller's transaction (got {type(transaction).__name__})"
        )

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()

    # ------------------------------------------------------------ JobCrudStore

    def insert_job(self, job: JobEntity) -> JobEntity:
        with self._write() as conn:
            if not self._insert(conn, job):
                key = job.idempotency_key
                return self._select(conn, "idempotency_key = ?", (key,))[0]
            return self._select(conn, "id = ?", (str(job.id),))[0]

    def find_by_id(self, job_id: UUID) -> JobEntity | None:
        found = self._select(self._conn(), "id = ?", (str(job_id),))
        return found[0] if found else None

    def find_by_idempotency_key(self, key: str) -> JobEntity | None:
        found = self._select(self._conn(), "idempotency_key = ?", (key,))
        return found[0] if found else None

    def update_job(self, job: JobEntity) -> JobEntity:
        with self._write() as conn:
            if not conn.execute("SELECT 1 FROM v1_jobs WHERE id = ?", (str(job.id),)).fetchone():
                raise JobNotFoundError(job.id)
            values = _row_values(job)
            sets = ", ".join(f"{c} = ?" for c in _COLUMNS[1:])
            conn.execute(f"UPDATE v1_jobs SET {sets} WHERE id = ?", [*values[1:], str(job.id)])
            conn.execute(
                "UPDATE v1_jobs SET updated_at = ? WHERE id = ?", (self._now(), str(job.id))
            )
            conn.execute("DELETE FROM v1_tags WHERE job_id = ?", (str(job.id),))
            conn.executemany(
                "INSERT OR IGNORE INTO v1_tags (job_id, tag) VALUES (?, ?)",
                [(str(job.id), t) for t in job.tags],
            )
            return self._select(conn, "id = ?", (str(job.id),))[0]

    def delete_job(self, job_id: UUID) -> bool:
        with self._write() as conn:
            conn.execute("DELETE FROM v1_tags WHERE job_id = ?", (str(job_id),))
            return conn.execute("DELETE FROM v1_jobs WHERE id = ?", (str(job_id),)).rowcount > 0

    # ------------------------------------------------------------ JobClaimStore

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
        now = self._now()
        where = ["status = 'PENDING'", "scheduled_at <= ?"]
        args: list[Any] = [now]
        if execution_targets is not None:
            marks = ", ".join("?" for _ in execution_targets)
            where.append(f"(execution_target IS NULL OR execution_target IN ({marks}))")
            args += list(execution_targets)
        if tag_filter is not None:
            for tag in sorted(tag_filter.required):
                where.append("id IN (SELECT job_id FROM v1_tags WHERE tag = ?)")
                args.append(tag)
            for tag in sorted(tag_filter.excluded):
                where.append("id NOT IN (SELECT job_id FROM v1_tags WHERE tag = ?)")
                args.append(tag)
        with self._write() as conn:
            ids = [
                r["id"]
                for r in conn.execute(
                    f"SELECT id FROM v1_jobs WHERE {' AND '.join(where)} "
                    "ORDER BY priority DESC, scheduled_at, id LIMIT ?",
                    [*args, limit],
                ).fetchall()
            ]
            claimed = []
            for job_id in ids:
                conn.execute(
                    "UPDATE v1_jobs SET status = 'RUNNING', owner = ?, started_at = ?, "
                    "heartbeat_at = ?, attempt = attempt + 1, claim_seq = claim_seq + 1, "
                    "updated_at = ? WHERE id = ?",
                    (node_id, now, now, now, job_id),
                )
                claimed += self._select(conn, "id = ?", (job_id,))
            return claimed

    # ------------------------------------------------------------ JobTerminalStore

    def _fenced(
        self, conn: sqlite3.Connection, job_id: UUID, claim_seq: int, sets: str, args: Sequence[Any]
    ) -> bool:
        cursor = conn.execute(
            f"UPDATE v1_jobs SET {sets}, updated_at = ? "
            "WHERE id = ? AND status = 'RUNNING' AND claim_seq = ?",
            [*args, self._now(), str(job_id), claim_seq],
        )
        return cursor.rowcount > 0

    def mark_succeeded(self, job_id: UUID, claim_seq: int, result: str | None) -> bool:
        with self._write() as conn:
            return self._fenced(
                conn,
                job_id,
                claim_seq,
                "status = 'SUCCEEDED', result = ?, finished_at = ?, owner = NULL",
                (result, self._now()),
            )

    def mark_succeeded_many(self, completions: Sequence[Completion]) -> set[UUID]:
        applied = set()
        with self._write() as conn:
            for c in completions:
                if self._fenced(
                    conn,
                    c.job_id,
                    c.claim_seq,
                    "status = 'SUCCEEDED', result = ?, finished_at = ?, owner = NULL",
                    (c.result, self._now()),
                ):
                    applied.add(c.job_id)
        return applied

    def mark_failed_terminal(self, job_id: UUID, claim_seq: int, error: str) -> bool:
        with self._write() as conn:
            return self._fenced(
                conn,
                job_id,
                claim_seq,
                "status = 'FAILED', last_error = ?, finished_at = ?, owner = NULL",
                (error, self._now()),
            )

    def cancel_job(self, job_id: UUID) -> bool:
        now = self._now()
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE v1_jobs SET status = 'CANCELLED', finished_at = ?, owner = NULL, "
                f"updated_at = ? WHERE id = ? AND status NOT IN {_TERMINAL}",
                (now, now, str(job_id)),
            )
            return cursor.rowcount > 0

    # ------------------------------------------------------------ JobRetryStore

    def schedule_retry(self, job_id: UUID, claim_seq: int, run_at: datetime, error: str) -> bool:
        due = _us(run_at, "run_at")
        with self._write() as conn:
            return self._fenced(
                conn,
                job_id,
                claim_seq,
                "status = 'PENDING', scheduled_at = ?, last_error = ?, owner = NULL",
                (due, error),
            )

    def retry_dead_letter(self, job_id: UUID, run_at: datetime | None = None) -> bool:
        due = self._now() if run_at is None else _us(run_at, "run_at")
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE v1_jobs SET status = 'PENDING', scheduled_at = ?, attempt = 0, "
                "finished_at = NULL, updated_at = ? WHERE id = ? AND status = 'FAILED'",
                (due, self._now(), str(job_id)),
            )
            return cursor.rowcount > 0

    # ------------------------------------------------------------ JobPauseStore

    def _move(self, job_id: UUID, old: str, new: str) -> bool:
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE v1_jobs SET status = ?, updated_at = ? WHERE id = ? AND status = ?",
                (new, self._now(), str(job_id), old),
            )
            return cursor.rowcount > 0

    def pause_job(self, job_id: UUID) -> bool:
        return self._move(job_id, "PENDING", "PAUSED")

    def resume_job(self, job_id: UUID) -> bool:
        return self._move(job_id, "PAUSED", "PENDING")

    # ------------------------------------------------------------ JobBatchStatusStore

    def compare_and_swap_status(self, job_id: UUID, expected: JobStatus, new: JobStatus) -> bool:
        return self._move(job_id, expected.value, new.value)

    def release_claim(self, job_id: UUID, claim_seq: int) -> bool:
        with self._write() as conn:
            return self._fenced(
                conn,
                job_id,
                claim_seq,
                "status = 'PENDING', attempt = attempt - 1, owner = NULL, started_at = NULL, "
                "heartbeat_at = NULL",
                (),
            )

    def reset_running_jobs(self, node_id: str) -> int:
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE v1_jobs SET status = 'PENDING', owner = NULL, updated_at = ? "
                "WHERE status = 'RUNNING' AND owner = ?",
                (self._now(), node_id),
            )
            return cursor.rowcount

    def find_children(self, parent_id: UUID) -> list[JobEntity]:
        return self._select(
            self._conn(), "parent_id = ? ORDER BY created_at, id", (str(parent_id),)
        )

    def release_waiting_children(self, parent_id: UUID, child_ids: Sequence[UUID]) -> int:
        if not child_ids:
            return 0
        marks = ", ".join("?" for _ in child_ids)
        now = self._now()
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE v1_jobs SET status = 'PENDING', scheduled_at = ?, updated_at = ? "
                f"WHERE parent_id = ? AND status = 'WAITING' AND id IN ({marks})",
                [now, now, str(parent_id), *(str(c) for c in child_ids)],
            )
            return cursor.rowcount

    def find_orphaned_children(self, limit: int) -> list[JobEntity]:
        return self._select(
            self._conn(),
            "status = 'WAITING' AND parent_id IS NOT NULL AND NOT EXISTS ("
            "SELECT 1 FROM v1_jobs p WHERE p.id = v1_jobs.parent_id "
            f"AND p.status NOT IN {_TERMINAL}) ORDER BY created_at, id LIMIT ?",
            (limit,),
        )

    # ------------------------------------------------------------ JobBulkStore

    def bulk_insert(self, jobs: Sequence[JobEntity]) -> int:
        inserted = 0
        with self._write() as conn:
            for job in jobs:
                inserted += self._insert(conn, job)
        return inserted

    def reset_orphan_jobs(self, node_ids: Sequence[str]) -> int:
        if not node_ids:
            return 0
        marks = ", ".join("?" for _ in node_ids)
        now = self._now()
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE v1_jobs SET status = 'PENDING', owner = NULL, scheduled_at = ?, "
                f"updated_at = ? WHERE status = 'RUNNING' AND owner IN ({marks})",
                [now, now, *node_ids],
            )
            return cursor.rowcount

    def find_stale_running_jobs(self, heartbeat_before: datetime, limit: int) -> list[JobEntity]:
        return self._select(
            self._conn(),
            "status = 'RUNNING' AND heartbeat_at < ? ORDER BY heartbeat_at, id LIMIT ?",
            (_us(heartbeat_before, "heartbeat_before"), limit),
        )

    def touch_running_jobs(self, node_id: str, job_ids: Sequence[UUID]) -> int:
        if not job_ids:
            return 0
        marks = ", ".join("?" for _ in job_ids)
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE v1_jobs SET heartbeat_at = ? "
                f"WHERE status = 'RUNNING' AND owner = ? AND id IN ({marks})",
                [self._now(), node_id, *(str(j) for j in job_ids)],
            )
            return cursor.rowcount

    def delete_dead_letter_older_than(self, cutoff: datetime, limit: int) -> int:
        with self._write() as conn:
            ids = [
                r["id"]
                for r in conn.execute(
                    "SELECT id FROM v1_jobs WHERE status = 'FAILED' AND finished_at < ? "
                    "ORDER BY finished_at LIMIT ?",
                    (_us(cutoff, "cutoff"), limit),
                ).fetchall()
            ]
            for job_id in ids:
                conn.execute("DELETE FROM v1_tags WHERE job_id = ?", (job_id,))
                conn.execute("DELETE FROM v1_jobs WHERE id = ?", (job_id,))
            return len(ids)

    # ------------------------------------------------------------ NodeStore

    def server_now(self) -> datetime:
        now = _dt(self._now())
        assert now is not None
        return now

    def upsert_heartbeat(self, node: NodeEntity) -> None:
        now = self._now()
        with self._write() as conn:
            conn.execute(
                "INSERT INTO v1_nodes (node_id, host, pid, started_at, last_heartbeat, "
                "running_jobs, tags) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (node_id) DO "
                "UPDATE SET host = excluded.host, pid = excluded.pid, last_heartbeat = "
                "excluded.last_heartbeat, running_jobs = excluded.running_jobs, tags = "
                "excluded.tags",
                (
                    node.node_id,
                    node.host,
                    node.pid,
                    _us(node.started_at, "started_at"),
                    now,
                    node.running_jobs,
                    "\n".join(node.tags),
                ),
            )

    def _nodes(self, where: str, args: Sequence[Any]) -> list[NodeEntity]:
        rows = self._conn().execute(f"SELECT * FROM v1_nodes WHERE {where}", args).fetchall()
        return [
            NodeEntity(
                node_id=r["node_id"],
                host=r["host"],
                pid=r["pid"],
                started_at=_dt(r["started_at"]) or datetime.now(UTC),
                last_heartbeat=_dt(r["last_heartbeat"]) or datetime.now(UTC),
                running_jobs=r["running_jobs"],
                tags=tuple(t for t in r["tags"].split("\n") if t),
            )
            for r in rows
        ]

    def find_inactive_nodes(self, timeout: timedelta) -> list[NodeEntity]:
        cutoff = self._now() - int(timeout.total_seconds() * 1_000_000)
        return self._nodes("last_heartbeat < ? ORDER BY node_id", (cutoff,))

    def find_all_nodes(self) -> list[NodeEntity]:
        return self._nodes("1 = 1 ORDER BY node_id", ())

    def delete_inactive_nodes(self, timeout: timedelta) -> int:
        cutoff = self._now() - int(timeout.total_seconds() * 1_000_000)
        with self._write() as conn:
            return conn.execute("DELETE FROM v1_nodes WHERE last_heartbeat < ?", (cutoff,)).rowcount

    def delete_nodes_by_ids(self, node_ids: Sequence[str]) -> int:
        if not node_ids:
            return 0
        marks = ", ".join("?" for _ in node_ids)
        with self._write() as conn:
            return conn.execute(
                f"DELETE FROM v1_nodes WHERE node_id IN ({marks})", list(node_ids)
            ).rowcount

    # ------------------------------------------------------------ TagStore

    def insert_tags(self, job_id: UUID, tags: Sequence[str]) -> None:
        for tag in tags:
            if len(tag) > MAX_TAG_LENGTH:
                raise StoreDataError(
                    "tags", f"tag is {len(tag)} characters, the limit is {MAX_TAG_LENGTH}"
                )
        with self._write() as conn:
            if not conn.execute("SELECT 1 FROM v1_jobs WHERE id = ?", (str(job_id),)).fetchone():
                raise JobNotFoundError(job_id)
            conn.executemany(
                "INSERT OR IGNORE INTO v1_tags (job_id, tag) VALUES (?, ?)",
                [(str(job_id), t) for t in tags],
            )

    def delete_tags_by_job_id(self, job_id: UUID) -> int:
        with self._write() as conn:
            return conn.execute("DELETE FROM v1_tags WHERE job_id = ?", (str(job_id),)).rowcount

    def find_tags(self, job_id: UUID) -> list[str]:
        rows = (
            self._conn()
            .execute("SELECT tag FROM v1_tags WHERE job_id = ? ORDER BY tag", (str(job_id),))
            .fetchall()
        )
        return [r["tag"] for r in rows]

    # ------------------------------------------------------------ for tests and the fixture

    def clear(self) -> None:
        """Delete every row (the TCK fixture's cleanup)."""
        with self._write() as conn:
            conn.execute("DELETE FROM v1_tags")
            conn.execute("DELETE FROM v1_jobs")
            conn.execute("DELETE FROM v1_nodes")
