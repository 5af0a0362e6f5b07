"""Signals: waking jobs that await one, by id or key, and expiring those past their deadline."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import sqlalchemy as sa

from ratchet_api.errors import StoreDataError
from ratchet_api.model import (
    JobStatus,
)
from ratchet_api.store.entities import (
    JobEntity,
)
from ratchet_store_sql._base import SqlBase
from ratchet_store_sql._capabilities._common import J

AWAITING = JobStatus.AWAITING_SIGNAL.value


class SignalOperations(SqlBase):
    def _deliver(self, operation: str, where: sa.ColumnElement[bool], payload: str | None) -> int:
        now = self._d.now()
        with self._write(operation) as conn:
            stmt = (
                sa.update(J)
                .where(where, J.c.status == AWAITING)
                .values(
                    status=JobStatus.PENDING.value,
                    scheduled_at=now,
                    signal_payload=payload,
                    updated_at=now,
                )
            )
            return int(conn.execute(stmt).rowcount)

    def deliver_signal_by_id(self, job_id: UUID, payload: str | None) -> bool:
        return self._deliver("deliver_signal_by_id", J.c.id == job_id, payload) == 1

    def deliver_signal_by_key(self, signal_key: str, payload: str | None) -> int:
        return self._deliver("deliver_signal_by_key", J.c.signal_key == signal_key, payload)

    def find_timed_out_signal_jobs(self, limit: int) -> list[JobEntity]:
        stmt = (
            sa.select(J)
            .where(
                J.c.status == AWAITING,
                J.c.signal_deadline.is_not(None),
                J.c.signal_deadline <= self._d.now(),
            )
            .order_by(J.c.signal_deadline, J.c.id)
            .limit(limit)
        )
        with self._read("find_timed_out_signal_jobs") as conn:
            return self._select_jobs(conn, stmt)

    def expire_signal(self, job_id: UUID, error: str, status: JobStatus = JobStatus.FAILED) -> bool:
        status = _expiry_status(status)
        now = self._d.now()
        values: dict[str, Any] = {"status": status.value, "last_error": error, "updated_at": now}
        if status is JobStatus.PENDING:
            values["scheduled_at"] = now
        else:
            values["finished_at"] = now
        with self._write("expire_signal") as conn:
            stmt = sa.update(J).where(J.c.id == job_id, J.c.status == AWAITING).values(**values)
            expired = conn.execute(stmt).rowcount == 1
            if expired and status is not JobStatus.PENDING:
                self._count_batch_child(conn, job_id, False)
            return expired

    def find_jobs_by_signal_key(self, signal_key: str, limit: int) -> list[JobEntity]:
        stmt = (
            sa.select(J)
            .where(J.c.signal_key == signal_key)
            .order_by(J.c.created_at, J.c.id)
            .limit(limit)
        )
        with self._read("find_jobs_by_signal_key") as conn:
            return self._select_jobs(conn, stmt)


def _expiry_status(status: Any) -> JobStatus:
    allowed = (JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.PENDING)
    if status not in allowed:
        raise StoreDataError("status", f"must be FAILED, CANCELLED or PENDING, got {status!r}")
    return JobStatus(status)


__all__ = ["SignalOperations"]
