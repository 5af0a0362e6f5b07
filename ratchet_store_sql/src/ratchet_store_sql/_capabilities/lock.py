"""Named locks with a lease (REQUIRES_NEW: they commit on their own connection)."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from ratchet_api.errors import StoreDataError
from ratchet_api.store.entities import (
    LockEntity,
)
from ratchet_store_sql import schema as s
from ratchet_store_sql._base import SqlBase, retry_conflicts
from ratchet_store_sql._convert import (
    row_to_lock,
)
from ratchet_store_sql._jobs import _seconds


class LockOperations(SqlBase):
    @retry_conflicts
    def try_lock(self, name: str, owner: str, ttl: timedelta) -> bool:
        seconds = _seconds(ttl, "ttl")
        if not owner:
            raise StoreDataError("owner", "must be a non-empty string")
        lk = s.locks
        d = self._d
        now = d.now()
        with self._independent("try_lock") as conn:
            # Take over an expired lease or refresh our own: the WHERE is re-checked under the
            # row lock, so at most one racer wins. Insert only when no lease row exists.
            stmt = (
                sa.update(lk)
                .where(lk.c.name == name, sa.or_(lk.c.owner == owner, lk.c.expires_at <= now))
                .ordered_values(
                    (lk.c.acquired_at, sa.case((lk.c.owner == owner, lk.c.acquired_at), else_=now)),
                    (lk.c.expires_at, d.now_plus(seconds)),
                    (lk.c.owner, owner),
                )
            )
            if conn.execute(stmt).rowcount == 1:
                return True
            inserted = d.insert_ignored_count(
                conn,
                d.insert_ignore(lk).values(
                    name=name, owner=owner, acquired_at=now, expires_at=d.now_plus(seconds)
                ),
                lk,
            )
            return bool(inserted == 1)

    @retry_conflicts
    def unlock(self, name: str, owner: str) -> bool:
        lk = s.locks
        with self._independent("unlock") as conn:
            return (
                conn.execute(sa.delete(lk).where(lk.c.name == name, lk.c.owner == owner)).rowcount
                == 1
            )

    @retry_conflicts
    def renew_lock(self, name: str, owner: str, ttl: timedelta) -> bool:
        seconds = _seconds(ttl, "ttl")
        lk = s.locks
        d = self._d
        with self._independent("renew_lock") as conn:
            stmt = (
                sa.update(lk)
                .where(lk.c.name == name, lk.c.owner == owner, lk.c.expires_at > d.now())
                .values(expires_at=d.now_plus(seconds))
            )
            return conn.execute(stmt).rowcount == 1

    def find_lock(self, name: str) -> LockEntity | None:
        with self._read("find_lock") as conn:
            row = conn.execute(sa.select(s.locks).where(s.locks.c.name == name)).mappings().first()
            return row_to_lock(row) if row is not None else None


__all__ = ["LockOperations"]
