"""The worker's batched hot writes (``WorkerBatchStore``): the claim that marks the jobs
starting at once, and many fenced failure writes in one unit (one statement per chunk on
PostgreSQL, in autocommit). The statements are the dialect's (``_dialects``)."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from ratchet_api.errors import StoreDataError
from ratchet_api.model import NodeTagFilter
from ratchet_api.store.entities import FailedClaim, JobEntity
from ratchet_store_sql._base import CHUNK, SqlBase, chunks
from ratchet_store_sql._jobs import claim_jobs


class WorkerBatchOperations(SqlBase):
    def claim_and_start(
        self,
        node_id: str,
        limit: int,
        *,
        start: int,
        execution_targets: Sequence[str] | None = None,
        tag_filter: NodeTagFilter | None = None,
    ) -> list[JobEntity]:
        if start < 0:
            raise StoreDataError("start", f"must be at least 0, got {start}")
        if limit <= 0:
            return []
        return claim_jobs(self, node_id, limit, execution_targets, tag_filter, start=start)

    def write_failures(self, failures: Sequence[FailedClaim]) -> set[UUID]:
        if not failures:
            return set()
        last = list({f.job_id: f for f in failures}.values())  # the last write of a job wins
        applied: set[UUID] = set()
        now = self._d.now()
        # one statement per chunk on PostgreSQL (a single chunk runs in autocommit); one
        # transaction elsewhere
        single = len(last) <= CHUNK and self._d.is_pg
        write = self._write_statement if single else self._write
        with write("write_failures") as conn:
            for part in chunks(last):
                applied |= self._d.fail_chunk(conn, part, now)
        return applied


__all__ = ["WorkerBatchOperations"]
