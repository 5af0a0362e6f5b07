"""Flow control: deferring a claimed job and token-bucket rate limits."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

import sqlalchemy as sa

from ratchet_api.errors import StoreDataError
from ratchet_api.model import (
    JobStatus,
)
from ratchet_store_sql import schema as s
from ratchet_store_sql._base import SqlBase, retry_conflicts
from ratchet_store_sql._capabilities._common import J
from ratchet_store_sql._convert import (
    require_utc,
)
from ratchet_store_sql._jobs import _seconds


class FlowControlOperations(SqlBase):
    if TYPE_CHECKING:

        def _fenced(
            self,
            operation: str,
            job_id: UUID,
            claim_seq: int,
            values: dict[str, Any],
            *,
            finishes: bool | None = None,
        ) -> bool: ...

    def defer_claim(self, job_id: UUID, claim_seq: int, run_at: datetime) -> bool:
        require_utc(run_at, "run_at")
        return self._fenced(
            "defer_claim",
            job_id,
            claim_seq,
            {
                "status": JobStatus.PENDING.value,
                "scheduled_at": run_at,
                "attempt": sa.case((J.c.attempt > 0, J.c.attempt - 1), else_=0),
                "owner": None,
                "started_at": None,
                "heartbeat_at": None,
            },
        )

    @retry_conflicts
    def acquire_rate(self, key: str, limit: int, per: timedelta) -> timedelta:
        if not key or len(key) > s.KEY:
            raise StoreDataError("key", f"must be 1 to {s.KEY} characters")
        if limit < 1:
            raise StoreDataError("limit", f"must be at least 1, got {limit}")
        seconds = _seconds(per, "per")
        if seconds <= 0:
            raise StoreDataError("per", f"must be positive, got {per}")
        rate = limit / seconds
        r = s.rate_limits
        with self._write("acquire_rate") as conn:
            pick = sa.select(r.c.tokens, r.c.refreshed_at).where(r.c.key == key).with_for_update()
            row = conn.execute(pick).first()
            if row is None:
                # a new bucket starts full; racers insert once, then all lock the row
                now = conn.execute(sa.select(self._d.now())).scalar_one()
                conn.execute(
                    self._d.insert_ignore(r), [{"key": key, "tokens": limit, "refreshed_at": now}]
                )
                row = conn.execute(pick).one()
            tokens, refreshed_at = row
            # the clock is read once the row is locked (a statement's clock is its start, and a
            # time read before waiting for the lock would refill the same interval twice)
            now = max(refreshed_at, conn.execute(sa.select(self._d.now())).scalar_one())
            elapsed = (now - refreshed_at).total_seconds()
            tokens = min(float(limit), tokens + elapsed * rate)
            wait = 0.0
            if tokens >= 1.0:
                tokens -= 1.0
            else:
                wait = (1.0 - tokens) / rate
            conn.execute(sa.update(r).where(r.c.key == key).values(tokens=tokens, refreshed_at=now))
        return timedelta(seconds=wait)


__all__ = ["FlowControlOperations"]
