"""Extension properties and versioned state of jobs."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from ratchet_api.errors import JobNotFoundError, StoreDataError
from ratchet_api.model import (
    JobStatus,
    StateWriteResult,
    VersionedState,
)
from ratchet_store_sql import schema as s
from ratchet_store_sql._base import SqlBase, chunks
from ratchet_store_sql._capabilities._common import ST, A, J, P


class ExtensionOperations(SqlBase):
    def _require_job(self, conn: sa.Connection, job_id: UUID) -> None:
        if conn.execute(sa.select(J.c.id).where(J.c.id == job_id)).first() is None:
            raise JobNotFoundError(job_id)

    def put_property(self, job_id: UUID, key: str, value: str) -> bool:
        if not key:
            raise StoreDataError("key", "must be a non-empty string")
        if len(key) > s.KEY:
            raise StoreDataError("key", f"is {len(key)} characters, the limit is {s.KEY}")
        with self._write("put_property") as conn:
            self._require_job(conn, job_id)
            stmt = self._d.insert_ignore(P).values(job_id=job_id, key=key, value=value)
            return self._d.insert_ignored_count(conn, stmt, P) == 1

    @staticmethod
    def _archived(conn: sa.Connection, job_id: UUID, column: str) -> dict[str, Any]:
        """Properties or state of an archived job (kept as JSON on its archive row)."""
        text = conn.execute(sa.select(A.c[column]).where(A.c.id == job_id)).scalar_one_or_none()
        if text is None:
            return {}
        try:
            value = json.loads(text)
        except ValueError:
            raise StoreDataError(column, "archived value is not JSON", job_id=job_id) from None
        return dict(value)

    def get_property(self, job_id: UUID, key: str) -> str | None:
        with self._read("get_property") as conn:
            value = conn.execute(
                sa.select(P.c.value).where(P.c.job_id == job_id, P.c.key == key)
            ).scalar_one_or_none()
            if value is None:
                value = self._archived(conn, job_id, "properties").get(key)
            return None if value is None else str(value)

    def get_properties_by_prefix(self, job_id: UUID, prefix: str) -> dict[str, str]:
        with self._read("get_properties_by_prefix") as conn:
            rows: list[tuple[Any, Any]] = list(
                conn.execute(
                    sa.select(P.c.key, P.c.value).where(
                        P.c.job_id == job_id, P.c.key.startswith(prefix, autoescape=True)
                    )
                )
            )
            if not rows:
                rows = list(self._archived(conn, job_id, "properties").items())
            return {k: v for k, v in rows if k.startswith(prefix)}

    def get_state(self, job_id: UUID, namespace: str) -> VersionedState | None:
        with self._read("get_state") as conn:
            row = conn.execute(
                sa.select(ST.c.json, ST.c.version).where(
                    ST.c.job_id == job_id, ST.c.namespace == namespace
                )
            ).first()
            if row is not None:
                return VersionedState(json=row[0], version=row[1])
            archived = self._archived(conn, job_id, "state").get(namespace)
            if archived is None:
                return None
            return VersionedState(json=archived["json"], version=archived["version"])

    def _fence_ok(self, conn: sa.Connection, job_id: UUID, claim_seq: int | None) -> bool:
        row = conn.execute(
            sa.select(J.c.status, J.c.claim_seq).where(J.c.id == job_id).with_for_update()
        ).first()
        if row is None:
            raise JobNotFoundError(job_id)
        if claim_seq is None:
            return True
        return bool(row[0] == JobStatus.RUNNING.value and row[1] == claim_seq)

    def init_state(
        self, job_id: UUID, namespace: str, state: str, expected_claim_seq: int | None = None
    ) -> StateWriteResult:
        if not namespace or len(namespace) > s.KEY:
            raise StoreDataError("namespace", f"must be 1 to {s.KEY} characters")
        with self._write("init_state") as conn:
            if not self._fence_ok(conn, job_id, expected_claim_seq):
                return StateWriteResult.SUPERSEDED
            stmt = self._d.insert_ignore(ST).values(
                job_id=job_id, namespace=namespace, json=state, version=0
            )
            if self._d.insert_ignored_count(conn, stmt, ST) == 1:
                return StateWriteResult.UPDATED
            return StateWriteResult.VERSION_CONFLICT

    def update_state(
        self,
        job_id: UUID,
        namespace: str,
        state: str,
        expected_version: int,
        expected_claim_seq: int | None = None,
    ) -> StateWriteResult:
        with self._write("update_state") as conn:
            if not self._fence_ok(conn, job_id, expected_claim_seq):
                return StateWriteResult.SUPERSEDED
            stmt = (
                sa.update(ST)
                .where(
                    ST.c.job_id == job_id,
                    ST.c.namespace == namespace,
                    ST.c.version == expected_version,
                )
                .values(json=state, version=ST.c.version + 1)
            )
            if conn.execute(stmt).rowcount == 1:
                return StateWriteResult.UPDATED
            return StateWriteResult.VERSION_CONFLICT

    def properties_for_jobs(self, job_ids: Sequence[UUID]) -> Mapping[UUID, dict[str, str]]:
        found: dict[UUID, dict[str, str]] = {}
        with self._read("properties_for_jobs") as conn:
            for part in chunks(list(job_ids)):
                for job_id, key, value in conn.execute(
                    sa.select(P.c.job_id, P.c.key, P.c.value).where(P.c.job_id.in_(part))
                ):
                    found.setdefault(job_id, {})[key] = value
        return found


__all__ = ["ExtensionOperations"]
