"""MySQL and MariaDB (PyMySQL): no ``UPDATE ... RETURNING``, so the claim and the fenced
batch writes lock their rows with ``SELECT ... FOR UPDATE`` (``SKIP LOCKED`` for the claim
where the server has it) and update them by id in the same transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from ratchet_api.model import NodeTagFilter
from ratchet_api.store.entities import Completion, JobEntity
from ratchet_store_sql._base import SqlBase
from ratchet_store_sql._dialects.base import (
    PENDING,
    RUNNING,
    UTC_TYPE,
    Dialect,
    J,
    claim_filter,
    claim_order,
    claim_values,
    count_per_batch,
    fair_candidates,
    succeeded_values,
)

_FIRST_KEY = (
    sa.select(J.c.fairness_key)
    .where(J.c.status == PENDING, J.c.fairness_key.is_not(None))
    .order_by(J.c.fairness_key)
    .limit(1)
)
_KEYS_AFTER = sa.select(J.c.fairness_key).where(
    J.c.status == PENDING, J.c.fairness_key > sa.bindparam("after", type_=J.c.fairness_key.type)
)
_NEXT_KEY = _KEYS_AFTER.order_by(J.c.fairness_key).limit(1)
_REST_KEYS = _KEYS_AFTER.group_by(J.c.fairness_key).order_by(J.c.fairness_key)
PROBED_KEYS = 32
"""Keys read by one probe each; the keys after them are read by one statement (1,000 keys were
1,001 round trips per fair claim, 350 ms behind 20,000 jobs)."""


def fair_keys(conn: sa.Connection) -> list[str]:
    """The fairness keys of PENDING jobs, one probe of ``ix_ratchet_jobs_status_fair_claim``
    each (a loose index scan) for the first ``PROBED_KEYS``, the rest in one statement. A
    statement per key: MariaDB plans the recursive CTE the other dialects use with its step
    reading every PENDING entry of the index (a correlated ``fairness_key > k`` is not a range
    there), 17 ms for 5 keys behind 15,000 jobs of one, where a probe with the key as a
    parameter reads one entry."""
    keys: list[str] = []
    key = conn.execute(_FIRST_KEY).scalar()
    while key is not None:
        keys.append(key)
        if len(keys) == PROBED_KEYS:
            # many keys: the rest in one statement (a read of the PENDING entries after the
            # last key probed), not one round trip each
            keys.extend(conn.execute(_REST_KEYS, {"after": key}).scalars())
            break
        key = conn.execute(_NEXT_KEY, {"after": key}).scalar()
    return keys


class MysqlDialect(Dialect):
    name = "mysql"
    is_mysql = True

    def __init__(self, engine: sa.Engine, *, load_tags_on_claim: bool = True) -> None:
        super().__init__(engine, load_tags_on_claim=load_tags_on_claim)
        self._skip: bool | None = None

    def now_plus(self, seconds: float) -> sa.ColumnElement[datetime]:
        expr: sa.ColumnElement[Any] = sa.func.utc_timestamp(6)
        if seconds:
            expr = sa.func.timestampadd(sa.text("MICROSECOND"), round(seconds * 1_000_000), expr)
        return sa.type_coerce(expr, UTC_TYPE)

    def seconds_between(
        self, start: sa.ColumnElement[Any], end: sa.ColumnElement[Any]
    ) -> sa.ColumnElement[float]:
        expr = sa.func.timestampdiff(sa.text("MICROSECOND"), start, end) / 1_000_000.0
        return sa.type_coerce(expr, sa.Float())

    def insert_ignore(self, table: sa.Table) -> Any:
        return mysql.insert(table).prefix_with("IGNORE")

    def upsert(
        self,
        table: sa.Table,
        values: Mapping[str, Any],
        keys: Sequence[str],
        update: Mapping[str, Any],
    ) -> Any:
        return mysql.insert(table).values(**values).on_duplicate_key_update(**update)

    def upsert_many(self, table: sa.Table, keys: Sequence[str], columns: Sequence[str]) -> Any:
        my = mysql.insert(table)
        return my.on_duplicate_key_update({c: my.inserted[c] for c in columns})

    # ------------------------------------------------------------------ hot statements

    def _skip_locked(self, conn: sa.Connection) -> bool:
        """``SKIP LOCKED`` is there: MariaDB 10.6+, MySQL 8+ (read once per store)."""
        if self._skip is None:
            version = conn.dialect.server_version_info or ()
            if getattr(conn.dialect, "is_mariadb", False):
                self._skip = tuple(version[:2]) >= (10, 6)
            else:
                self._skip = tuple(version[:1]) >= (8,)
        return self._skip

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
        # Lock the picked rows (skipping rows other claimers hold), update them by id, and
        # build the result from the locked rows.
        now = self.now()
        skip = self._skip_locked(conn)
        if self.fair_claims_needed(conn):
            # the fair candidates (best first), their rows locked here, the best `limit` kept
            keys = fair_keys(conn)
            chosen = fair_candidates(conn, now, limit, execution_targets, tag_filter, keys=keys)
            if not chosen:
                return []
            place = {job_id: index for index, job_id in enumerate(chosen)}
            stmt = (
                sa.select(J, now.label("_now"))
                .where(J.c.id.in_(chosen), J.c.status == PENDING)
                .with_for_update(skip_locked=skip)
            )
            locked = sorted(conn.execute(stmt).mappings(), key=lambda r: place[r["id"]])[:limit]
        else:
            stmt = (
                sa.select(J, now.label("_now"))
                .where(*claim_filter(now, execution_targets, tag_filter))
                .order_by(*claim_order())
                .limit(limit)
                .with_for_update(skip_locked=skip)
            )
            locked = list(conn.execute(stmt).mappings())
        if not locked:
            return []
        stamp = locked[0]["_now"]
        ids = [r["id"] for r in locked]
        values = claim_values(node_id)
        marked = set(ids[:start])  # locked in claim order: the first `start` start at once
        if marked:
            values["dispatched_at"] = (
                stamp
                if len(marked) == len(ids)
                else sa.case((J.c.id.in_(list(marked)), stamp), else_=sa.null())
            )
        conn.execute(
            sa.update(J)
            .where(J.c.id.in_(ids), J.c.status == PENDING)
            .values(started_at=stamp, heartbeat_at=stamp, updated_at=stamp, **values)
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
                dispatched_at=stamp if r["id"] in marked else None,
            )
            rows.append(row)
        return self.jobs_with_tags(conn, rows)

    def dispatch_chunk(self, conn: sa.Connection, part: Sequence[tuple[UUID, int]]) -> set[UUID]:
        fence = self.running_claims(part)
        locked = set(conn.execute(sa.select(J.c.id).where(fence).with_for_update()).scalars())
        if locked:
            # the first mark of a claim stands (a repeated mark still reports the claim current)
            stamp = sa.func.coalesce(J.c.dispatched_at, self.now())
            conn.execute(sa.update(J).where(J.c.id.in_(list(locked))).values(dispatched_at=stamp))
        return locked

    def succeed_chunk(
        self, conn: sa.Connection, part: Sequence[Completion], now: sa.ColumnElement[datetime]
    ) -> set[UUID]:
        fence = self.running_claims([(c.job_id, c.claim_seq) for c in part])
        done: list[Any] = list(
            conn.execute(sa.select(J.c.id, J.c.batch_id).where(fence).with_for_update())
        )
        if done:
            ids = [row[0] for row in done]
            conn.execute(sa.update(J).where(J.c.id.in_(ids)).values(**succeeded_values(part, now)))
        per_batch = count_per_batch(done)
        if per_batch:
            SqlBase._count_batch_children(conn, per_batch)
        return {row[0] for row in done}


__all__ = ["MysqlDialect"]
