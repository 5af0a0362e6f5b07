"""``SealedValueStore``: the stored values payload encryption seals, read in pages and rewritten
by compare and set (key rotation)."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

import sqlalchemy as sa

from ratchet_api.errors import StoreDataError
from ratchet_api.store.entities import STORED_VALUE_COLUMNS, StoredValue
from ratchet_store_sql import schema as s
from ratchet_store_sql._base import SqlBase

J = s.jobs
ST = s.job_state
WC = s.workflow_conditions
_JOB_COLUMNS = ("payload", "result", "last_error", "signal_payload")


class SealedValueOperations(SqlBase):
    def scan_values(self, after: UUID | None, limit: int) -> list[StoredValue]:
        if limit < 1:
            raise StoreDataError("limit", f"must be at least 1, got {limit}")
        query = sa.select(
            J.c.id, J.c.payload, J.c.result, J.c.last_error, J.c.signal_payload
        ).order_by(J.c.id)
        if after is not None:
            query = query.where(J.c.id > after)
        values: list[StoredValue] = []
        with self._read("scan_values") as conn:
            rows = list(conn.execute(query.limit(limit)))
            if not rows:
                return values
            ids = [row[0] for row in rows]
            states: dict[UUID, list[tuple[str, str]]] = {}
            for job_id, namespace, text in conn.execute(
                sa.select(ST.c.job_id, ST.c.namespace, ST.c.json)
                .where(ST.c.job_id.in_(ids))
                .order_by(ST.c.job_id, ST.c.namespace)
            ):
                states.setdefault(job_id, []).append((namespace, text))
            conditions = dict(
                conn.execute(
                    sa.select(WC.c.child_job_id, WC.c.expression).where(
                        WC.c.child_job_id.in_(ids), WC.c.expression.is_not(None)
                    )
                ).all()
            )
        for row in rows:
            job_id = row[0]
            for column, text in zip(_JOB_COLUMNS, row[1:], strict=True):
                if text is not None:
                    values.append(StoredValue(job_id=job_id, column=column, text=text))
            for namespace, text in states.get(job_id, ()):
                values.append(
                    StoredValue(job_id=job_id, column="state", namespace=namespace, text=text)
                )
            if job_id in conditions:
                values.append(
                    StoredValue(job_id=job_id, column="condition", text=conditions[job_id])
                )
        return values

    def replace_values(self, changes: Sequence[tuple[StoredValue, str]]) -> int:
        statements = [_replacement(value, new_text) for value, new_text in changes]
        if not statements:
            return 0
        written = 0
        with self._write("replace_values") as conn:
            for stmt in statements:
                written += conn.execute(stmt).rowcount
        return written


def _replacement(value: StoredValue, new_text: str) -> sa.Update:
    if value.column not in STORED_VALUE_COLUMNS:
        raise StoreDataError(
            "column", f"{value.column!r} is not one of {', '.join(STORED_VALUE_COLUMNS)}"
        )
    if value.column == "state":
        return (
            sa.update(ST)
            .where(
                ST.c.job_id == value.job_id,
                ST.c.namespace == value.namespace,
                ST.c.json == value.text,
            )
            .values(json=new_text)
        )
    if value.column == "condition":
        return (
            sa.update(WC)
            .where(WC.c.child_job_id == value.job_id, WC.c.expression == value.text)
            .values(expression=new_text)
        )
    column = J.c[value.column]
    return (
        sa.update(J)
        .where(J.c.id == value.job_id, column == value.text)
        .values({value.column: new_text})
    )


__all__ = ["SealedValueOperations"]
