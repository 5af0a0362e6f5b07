"""Job search by filter, counts and tag look-ups."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import sqlalchemy as sa

from ratchet_api.model import (
    JobStatus,
)
from ratchet_api.store.entities import (
    JobEntity,
    JobQuery,
    SortOrder,
)
from ratchet_store_sql._base import SqlBase
from ratchet_store_sql._capabilities._common import J, P, T
from ratchet_store_sql._convert import (
    require_utc,
)


class QueryOperations(SqlBase):
    def _filters(self, query: JobQuery) -> list[sa.ColumnElement[bool]]:
        require_utc(query.created_after, "created_after")
        require_utc(query.created_before, "created_before")
        where: list[sa.ColumnElement[bool]] = []
        if query.statuses is not None:
            where.append(J.c.status.in_(sorted(JobStatus(x).value for x in query.statuses)))
        if query.target is not None:
            where.append(J.c.target == query.target)
        if query.tag is not None:
            where.append(sa.exists().where(T.c.job_id == J.c.id, T.c.tag == query.tag))
        if query.job_type is not None:
            where.append(J.c.job_type == query.job_type.value)
        if query.parent_id is not None:
            where.append(J.c.parent_id == query.parent_id)
        if query.batch_id is not None:
            where.append(J.c.batch_id == query.batch_id)
        if query.created_after is not None:
            where.append(J.c.created_at >= query.created_after)
        if query.created_before is not None:
            where.append(J.c.created_at < query.created_before)
        for key, value in sorted(query.properties.items()):
            where.append(
                sa.exists().where(P.c.job_id == J.c.id, P.c.key == key, P.c.value == value)
            )
        return where

    def search_jobs(self, query: JobQuery) -> list[JobEntity]:
        if query.order is SortOrder.NEWEST_FIRST:
            order = (J.c.created_at.desc(), J.c.id.desc())
        else:
            order = (J.c.created_at.asc(), J.c.id.asc())
        columns: list[Any] = list(J.c)
        if query.preview is not None:  # a listing: never load a large argument or result
            cut = query.preview + 1
            columns = [
                sa.func.substr(c, 1, cut, type_=c.type).label(c.name)
                if c.name in ("payload", "result")
                else c
                for c in J.c
            ]
        stmt = (
            sa.select(*columns)
            .where(*self._filters(query))
            .order_by(*order)
            .limit(query.limit)
            .offset(query.offset)
        )
        with self._read("search_jobs") as conn:
            return self._select_jobs(conn, stmt)

    def count_jobs(self, query: JobQuery) -> int:
        stmt = sa.select(sa.func.count()).select_from(J).where(*self._filters(query))
        with self._read("count_jobs") as conn:
            return int(conn.execute(stmt).scalar_one())

    def find_job_ids_by_tag(self, tag: str, limit: int) -> list[UUID]:
        stmt = sa.select(T.c.job_id).where(T.c.tag == tag).order_by(T.c.job_id).limit(limit)
        with self._read("find_job_ids_by_tag") as conn:
            return list(conn.execute(stmt).scalars())


__all__ = ["QueryOperations"]
