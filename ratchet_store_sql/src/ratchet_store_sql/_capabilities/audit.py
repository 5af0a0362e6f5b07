"""Audit: execution records and job log lines."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

import sqlalchemy as sa

from ratchet_api.store.entities import (
    ExecutionRecord,
    JobLogLine,
)
from ratchet_store_sql import schema as s
from ratchet_store_sql._base import SqlBase
from ratchet_store_sql._convert import (
    execution_to_row,
    log_to_row,
    row_to_execution,
    row_to_log,
)


class AuditOperations(SqlBase):
    def save_execution(self, record: ExecutionRecord) -> None:
        values = execution_to_row(record)
        update = {k: v for k, v in values.items() if k != "id"}
        with self._write("save_execution") as conn:
            conn.execute(self._d.upsert(s.executions, values, list(self._d.execution_key), update))

    def save_executions(self, records: Sequence[ExecutionRecord]) -> None:
        if not records:
            return
        self._d.save_executions(self, records)

    def find_executions_by_job_id(self, job_id: UUID) -> list[ExecutionRecord]:
        e = s.executions
        with self._read("find_executions_by_job_id") as conn:
            rows = conn.execute(
                sa.select(e).where(e.c.job_id == job_id).order_by(e.c.attempt, e.c.started_at)
            ).mappings()
            return [row_to_execution(r) for r in rows]

    def append_logs(self, lines: Sequence[JobLogLine]) -> None:
        if not lines:
            return
        rows = [log_to_row(x) for x in lines]
        with self._write("append_logs") as conn:
            conn.execute(sa.insert(s.job_logs), rows)

    def find_logs_by_job_id(self, job_id: UUID, limit: int = 1000) -> list[JobLogLine]:
        lg = s.job_logs
        with self._read("find_logs_by_job_id") as conn:
            rows = conn.execute(
                sa.select(lg).where(lg.c.job_id == job_id).order_by(lg.c.id).limit(limit)
            ).mappings()
            return [row_to_log(r) for r in rows]


__all__ = ["AuditOperations"]
