"""Recurring jobs: definitions and the compare-and-set advance of their next fire."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa

from ratchet_api.store.entities import (
    RecurringAdvance,
    RecurringJobEntity,
)
from ratchet_store_sql import schema as s
from ratchet_store_sql._base import SqlBase, retry_conflicts
from ratchet_store_sql._convert import (
    recurring_to_row,
    require_utc,
    row_to_recurring,
)


class RecurringOperations(SqlBase):
    def save_recurring(self, recurring: RecurringJobEntity) -> RecurringJobEntity:
        values = recurring_to_row(recurring)
        update = {k: v for k, v in values.items() if k != "name"}
        with self._write("save_recurring") as conn:
            conn.execute(self._d.upsert(s.recurring_jobs, values, ["name"], update))
        return recurring

    def find_recurring(self, name: str) -> RecurringJobEntity | None:
        with self._read("find_recurring") as conn:
            row = (
                conn.execute(sa.select(s.recurring_jobs).where(s.recurring_jobs.c.name == name))
                .mappings()
                .first()
            )
            return row_to_recurring(row) if row is not None else None

    def list_recurring(self) -> list[RecurringJobEntity]:
        with self._read("list_recurring") as conn:
            rows = conn.execute(
                sa.select(s.recurring_jobs).order_by(s.recurring_jobs.c.name)
            ).mappings()
            return [row_to_recurring(r) for r in rows]

    def find_due_recurring(self, limit: int) -> list[RecurringJobEntity]:
        r = s.recurring_jobs
        stmt = (
            sa.select(r)
            .where(r.c.enabled.is_(True), r.c.next_fire_at <= self._d.now())
            .order_by(r.c.next_fire_at, r.c.name)
            .limit(limit)
        )
        with self._read("find_due_recurring") as conn:
            return [row_to_recurring(x) for x in conn.execute(stmt).mappings()]

    @retry_conflicts
    def advance_next_fire(
        self, name: str, expected_fire_at: datetime, next_fire_at: datetime
    ) -> bool:
        require_utc(expected_fire_at, "expected_fire_at")
        require_utc(next_fire_at, "next_fire_at")
        r = s.recurring_jobs
        with self._write("advance_next_fire") as conn:
            stmt = (
                sa.update(r)
                .where(r.c.name == name, r.c.next_fire_at == expected_fire_at)
                .values(next_fire_at=next_fire_at, last_fired_at=expected_fire_at)
            )
            return conn.execute(stmt).rowcount == 1

    @retry_conflicts
    def advance_next_fire_many(self, advances: Sequence[RecurringAdvance]) -> set[str]:
        if not advances:
            return set()
        for a in advances:
            require_utc(a.expected_fire_at, "expected_fire_at")
            require_utc(a.next_fire_at, "next_fire_at")
        r = s.recurring_jobs
        stmt = (
            sa.update(r)
            .where(
                r.c.name == sa.bindparam("b_name"), r.c.next_fire_at == sa.bindparam("b_expected")
            )
            .values(next_fire_at=sa.bindparam("b_next"), last_fired_at=sa.bindparam("b_expected"))
        )
        won: set[str] = set()
        # one transaction, rows in name order: concurrent batches lock in the same order
        with self._write("advance_next_fire_many") as conn:
            for a in sorted(advances, key=lambda x: x.name):
                params = {
                    "b_name": a.name,
                    "b_expected": a.expected_fire_at,
                    "b_next": a.next_fire_at,
                }
                if conn.execute(stmt, params).rowcount == 1:
                    won.add(a.name)
        return won

    def delete_recurring(self, name: str) -> bool:
        with self._write("delete_recurring") as conn:
            r = s.recurring_jobs
            return conn.execute(sa.delete(r).where(r.c.name == name)).rowcount == 1


__all__ = ["RecurringOperations"]
