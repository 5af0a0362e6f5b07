"""Resource permits: at most ``limit`` live holders per resource, with a lease."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from ratchet_api.errors import StoreDataError
from ratchet_store_sql import schema as s
from ratchet_store_sql._base import SqlBase, retry_conflicts
from ratchet_store_sql._jobs import _seconds

SENTINEL = ""
"""Holder of the per-resource guard row that serializes permit acquisition."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class PermitOperations(SqlBase):
    @retry_conflicts
    def try_acquire_permit(
        self, resource_key: str, holder: str, limit: int, ttl: timedelta
    ) -> bool:
        if not holder:
            raise StoreDataError("holder", "must be a non-empty string")
        seconds = _seconds(ttl, "ttl")
        r = s.resource_permits
        d = self._d
        now = d.now()
        with self._write("try_acquire_permit") as conn:
            # Serialize acquirers of one resource on a guard row (BEGIN IMMEDIATE on SQLite).
            # Lock it first; create it only when missing (inserting first would take a shared
            # lock on MariaDB and deadlock the racers).
            guard = (
                sa.select(r.c.holder)
                .where(r.c.resource_key == resource_key, r.c.holder == SENTINEL)
                .with_for_update()
            )
            if conn.execute(guard).first() is None:
                conn.execute(
                    d.insert_ignore(r),
                    [
                        {
                            "resource_key": resource_key,
                            "holder": SENTINEL,
                            "acquired_at": _EPOCH,
                            "expires_at": _EPOCH,
                        }
                    ],
                )
                conn.execute(guard).first()
            refreshed = conn.execute(
                sa.update(r)
                .where(r.c.resource_key == resource_key, r.c.holder == holder, r.c.expires_at > now)
                .values(expires_at=d.now_plus(seconds))
            ).rowcount
            if refreshed:
                return True
            conn.execute(
                sa.delete(r).where(
                    r.c.resource_key == resource_key,
                    r.c.holder != SENTINEL,
                    r.c.expires_at <= now,
                )
            )
            live = conn.execute(
                sa.select(sa.func.count())
                .select_from(r)
                .where(r.c.resource_key == resource_key, r.c.holder != SENTINEL)
            ).scalar_one()
            if live >= limit:
                return False
            conn.execute(
                sa.insert(r).values(
                    resource_key=resource_key,
                    holder=holder,
                    acquired_at=now,
                    expires_at=d.now_plus(seconds),
                )
            )
            return True

    @retry_conflicts
    def release_permit(self, resource_key: str, holder: str) -> bool:
        if not holder:
            return False
        r = s.resource_permits
        with self._write("release_permit") as conn:
            return (
                conn.execute(
                    sa.delete(r).where(r.c.resource_key == resource_key, r.c.holder == holder)
                ).rowcount
                == 1
            )

    def count_permits(self, resource_key: str) -> int:
        r = s.resource_permits
        with self._read("count_permits") as conn:
            return int(
                conn.execute(
                    sa.select(sa.func.count())
                    .select_from(r)
                    .where(
                        r.c.resource_key == resource_key,
                        r.c.holder != SENTINEL,
                        r.c.expires_at > self._d.now(),
                    )
                ).scalar_one()
            )


__all__ = ["PermitOperations"]
