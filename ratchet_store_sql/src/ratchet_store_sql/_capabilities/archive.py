"""The archive: moving finished jobs out of the live tables and purging old ones."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from ratchet_api.errors import StoreDataError
from ratchet_api.model import (
    TERMINAL_STATUSES,
    JobStatus,
)
from ratchet_api.store.entities import (
    JobEntity,
)
from ratchet_store_sql import schema as s
from ratchet_store_sql._base import SqlBase, chunks
from ratchet_store_sql._capabilities._common import ST, TERMINAL, A, J, P, T
from ratchet_store_sql._convert import (
    JOB_FIELDS,
    require_utc,
    row_to_job,
)


def _terminal_values(statuses: Collection[JobStatus] | None) -> list[str]:
    """The status values an archive call may move (every terminal one for None)."""
    if statuses is None:
        return TERMINAL
    chosen = {JobStatus(x) for x in statuses}
    wrong = sorted(x.value for x in chosen - TERMINAL_STATUSES)
    if wrong:
        raise StoreDataError("statuses", f"only terminal statuses are archived, got {wrong}")
    return sorted(x.value for x in chosen)


class ArchiveOperations(SqlBase):
    def _archive(self, conn: sa.Connection, ids: Sequence[UUID]) -> int:
        rows = list(
            conn.execute(
                sa.select(J).where(J.c.id.in_(ids), J.c.status.in_(TERMINAL)).with_for_update()
            ).mappings()
        )
        if not rows:
            return 0
        found = [r["id"] for r in rows]
        tags = self._tags_for(conn, found)
        props: dict[UUID, dict[str, str]] = {}
        for job_id, key, value in conn.execute(
            sa.select(P.c.job_id, P.c.key, P.c.value).where(P.c.job_id.in_(found))
        ):
            props.setdefault(job_id, {})[key] = value
        states: dict[UUID, dict[str, Any]] = {}
        for job_id, ns, text, version in conn.execute(
            sa.select(ST.c.job_id, ST.c.namespace, ST.c.json, ST.c.version).where(
                ST.c.job_id.in_(found)
            )
        ):
            states.setdefault(job_id, {})[ns] = {"json": text, "version": version}
        now = self._d.now()
        archived = []
        for r in rows:
            row = {k: r[k] for k in JOB_FIELDS}
            row["tags"] = json.dumps(sorted(tags.get(r["id"], [])))
            row["properties"] = json.dumps(props.get(r["id"], {}), sort_keys=True)
            row["state"] = json.dumps(states.get(r["id"], {}), sort_keys=True)
            archived.append(row)
        stamp = conn.execute(sa.select(now)).scalar_one()
        for row in archived:
            row["archived_at"] = stamp
        conn.execute(sa.insert(A), archived)
        for table in (T, P, ST):
            conn.execute(sa.delete(table).where(table.c.job_id.in_(found)))
        conn.execute(sa.delete(J).where(J.c.id.in_(found)))
        return len(found)

    def archive_job(self, job_id: UUID) -> bool:
        with self._write("archive_job") as conn:
            return self._archive(conn, [job_id]) == 1

    def archive_finished_before(
        self, cutoff: datetime, limit: int, statuses: Collection[JobStatus] | None = None
    ) -> int:
        require_utc(cutoff, "cutoff")
        wanted = _terminal_values(statuses)
        if limit <= 0 or not wanted:
            return 0
        with self._write("archive_finished_before") as conn:
            ids = list(
                conn.execute(
                    sa.select(J.c.id)
                    .where(J.c.status.in_(wanted), J.c.finished_at < cutoff)
                    .order_by(J.c.finished_at, J.c.id)
                    .limit(limit)
                ).scalars()
            )
            return sum(self._archive(conn, part) for part in chunks(ids))

    def delete_archived_before(self, cutoff: datetime, limit: int) -> int:
        require_utc(cutoff, "cutoff")
        if limit <= 0:
            return 0
        with self._write("delete_archived_before") as conn:
            ids = list(
                conn.execute(
                    sa.select(A.c.id)
                    .where(A.c.finished_at < cutoff)
                    .order_by(A.c.finished_at, A.c.id)
                    .limit(limit)
                ).scalars()
            )
            count = 0
            for part in chunks(ids):
                for table in (s.executions, s.job_logs):
                    conn.execute(sa.delete(table).where(table.c.job_id.in_(part)))
                # the cutoff too: on PostgreSQL only the partitions before it are searched
                older = A.c.finished_at < cutoff
                count += conn.execute(sa.delete(A).where(A.c.id.in_(part), older)).rowcount
            return count

    @staticmethod
    def _from_archive(row: sa.RowMapping) -> JobEntity:
        try:
            tags = json.loads(row["tags"])
        except ValueError:
            raise StoreDataError("tags", "archived tags are not JSON", job_id=row["id"]) from None
        return row_to_job(row, tags)

    def find_archived_job(self, job_id: UUID) -> JobEntity | None:
        with self._read("find_archived_job") as conn:
            row = conn.execute(sa.select(A).where(A.c.id == job_id)).mappings().first()
            return self._from_archive(row) if row is not None else None

    def find_archived_jobs(self, limit: int, offset: int = 0) -> list[JobEntity]:
        stmt = (
            sa.select(A).order_by(A.c.finished_at.desc(), A.c.id.desc()).limit(limit).offset(offset)
        )
        with self._read("find_archived_jobs") as conn:
            return [self._from_archive(r) for r in conn.execute(stmt).mappings()]


__all__ = ["ArchiveOperations"]
