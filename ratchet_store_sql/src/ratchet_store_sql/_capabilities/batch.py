"""Batches: the batch row, its children and its progress counters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING
from uuid import UUID

import sqlalchemy as sa

from ratchet_api.errors import InvalidStateTransitionError, StoreDataError
from ratchet_api.model import (
    JobStatus,
)
from ratchet_api.store.entities import (
    BatchEntity,
    BatchStatus,
    JobEntity,
)
from ratchet_store_sql import schema as s
from ratchet_store_sql._base import SqlBase, retry_conflicts
from ratchet_store_sql._capabilities._common import TERMINAL, J
from ratchet_store_sql._convert import (
    batch_to_row,
    row_to_batch,
)


class BatchOperations(SqlBase):
    if TYPE_CHECKING:

        def _insert_jobs(self, conn: sa.Connection, jobs: Sequence[JobEntity]) -> int: ...

    def save_batch(self, batch: BatchEntity) -> BatchEntity:
        with self._write("save_batch") as conn:
            conn.execute(sa.insert(s.batches), [batch_to_row(batch)])
        return batch

    def insert_batch(self, batch: BatchEntity, jobs: Sequence[JobEntity]) -> int:
        with self._write("insert_batch") as conn:
            conn.execute(sa.insert(s.batches), [batch_to_row(batch)])
            return self._insert_jobs(conn, jobs) if jobs else 0

    def add_batch_jobs(self, batch_id: UUID, jobs: Sequence[JobEntity]) -> int:
        b = s.batches
        with self._write("add_batch_jobs") as conn:
            # the batch row is locked first: chunks of one batch are written one at a time
            status = conn.execute(
                sa.select(b.c.status).where(b.c.id == batch_id).with_for_update()
            ).scalar_one_or_none()
            if status is None:
                raise InvalidStateTransitionError(f"batch {batch_id} does not exist")
            if status != BatchStatus.OPEN.value:
                raise InvalidStateTransitionError(
                    f"batch {batch_id} is {status}: children can only be added to an OPEN batch"
                )
            inserted = self._insert_jobs(conn, jobs) if jobs else 0
            if inserted:
                conn.execute(
                    sa.update(b).where(b.c.id == batch_id).values(total=b.c.total + inserted)
                )
            return inserted

    def find_batches(
        self, *, statuses: frozenset[BatchStatus] | None = None, limit: int = 100, offset: int = 0
    ) -> list[BatchEntity]:
        b = s.batches
        stmt = sa.select(b).order_by(b.c.created_at.desc(), b.c.id.desc()).limit(limit)
        if offset:
            stmt = stmt.offset(offset)
        if statuses is not None:
            stmt = stmt.where(b.c.status.in_(sorted(BatchStatus(x).value for x in statuses)))
        with self._read("find_batches") as conn:
            return [row_to_batch(r) for r in conn.execute(stmt).mappings()]

    def recount_batch(self, batch_id: UUID) -> BatchEntity | None:
        b = s.batches
        with self._write("recount_batch") as conn:
            if (
                conn.execute(sa.select(b.c.id).where(b.c.id == batch_id).with_for_update()).first()
                is None
            ):
                return None
            counts: dict[str, int] = dict(
                conn.execute(
                    sa.select(J.c.status, sa.func.count())
                    .where(J.c.batch_id == batch_id, J.c.status.in_(TERMINAL))
                    .group_by(J.c.status)
                ).all()
            )
            succeeded = counts.get(JobStatus.SUCCEEDED.value, 0)
            failed = counts.get(JobStatus.FAILED.value, 0) + counts.get(
                JobStatus.CANCELLED.value, 0
            )
            conn.execute(
                sa.update(b)
                .where(b.c.id == batch_id)
                .values(
                    succeeded=sa.case((b.c.succeeded < succeeded, succeeded), else_=b.c.succeeded),
                    failed=sa.case((b.c.failed < failed, failed), else_=b.c.failed),
                )
            )
            return self._batch(conn, batch_id)

    def record_batch_error(self, batch_id: UUID, error: str) -> bool:
        b = s.batches
        with self._write("record_batch_error") as conn:
            return (
                conn.execute(
                    sa.update(b).where(b.c.id == batch_id).values(last_error=error)
                ).rowcount
                == 1
            )

    def _batch(self, conn: sa.Connection, batch_id: UUID) -> BatchEntity | None:
        row = conn.execute(sa.select(s.batches).where(s.batches.c.id == batch_id)).mappings()
        first = row.first()
        return row_to_batch(first) if first is not None else None

    def find_batch(self, batch_id: UUID) -> BatchEntity | None:
        with self._read("find_batch") as conn:
            return self._batch(conn, batch_id)

    def add_to_total(self, batch_id: UUID, count: int) -> BatchEntity:
        if count < 0:
            raise StoreDataError("count", f"must not be negative, got {count}")
        b = s.batches
        with self._write("add_to_total") as conn:
            changed = conn.execute(
                sa.update(b)
                .where(b.c.id == batch_id, b.c.status == BatchStatus.OPEN.value)
                .values(total=b.c.total + count)
            ).rowcount
            batch = self._batch(conn, batch_id)
            if batch is None:
                raise InvalidStateTransitionError(f"batch {batch_id} does not exist")
            if not changed:
                raise InvalidStateTransitionError(
                    f"batch {batch_id} is {batch.status.value}: children can only be added "
                    "to an OPEN batch"
                )
            return batch

    def seal_batch(self, batch_id: UUID) -> bool:
        b = s.batches
        with self._write("seal_batch") as conn:
            return (
                conn.execute(
                    sa.update(b)
                    .where(b.c.id == batch_id, b.c.status == BatchStatus.OPEN.value)
                    .values(status=BatchStatus.SEALED.value)
                ).rowcount
                == 1
            )

    @retry_conflicts
    def increment_finished(self, batch_id: UUID, succeeded: bool) -> BatchEntity:
        b = s.batches
        column = "succeeded" if succeeded else "failed"
        with self._write("increment_finished") as conn:
            changed = conn.execute(
                sa.update(b).where(b.c.id == batch_id).values({column: b.c[column] + 1})
            ).rowcount
            batch = self._batch(conn, batch_id)
            if not changed or batch is None:
                raise InvalidStateTransitionError(f"batch {batch_id} does not exist")
            return batch

    @retry_conflicts
    def mark_batch_complete_if_ready(self, batch_id: UUID) -> bool:
        b = s.batches
        with self._write("mark_batch_complete_if_ready") as conn:
            stmt = (
                sa.update(b)
                .where(
                    b.c.id == batch_id,
                    b.c.status == BatchStatus.SEALED.value,
                    b.c.succeeded + b.c.failed >= b.c.total,
                )
                .values(status=BatchStatus.COMPLETED.value, completed_at=self._d.now())
            )
            return conn.execute(stmt).rowcount == 1


__all__ = ["BatchOperations"]
