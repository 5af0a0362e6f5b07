"""``SealedValueStore`` and ``SealedArchiveStore``: the stored values payload encryption seals,
in live and in archived jobs, read in pages and rewritten by compare and set (key rotation).

An archived job keeps its columns on its ``ratchet_archived_jobs`` row and its state as one JSON
object on that row (``{namespace: {"json": text, "version": n}}``); its workflow condition stays
in ``ratchet_workflow_conditions``. The archive's statements are plain ``UPDATE ... WHERE id =
... AND <column> = <old text>`` against ``schema.archived_jobs``, which PostgreSQL runs the same
on its partitioned archive (the id leads the key of every partition).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from ratchet_api.errors import StoreDataError
from ratchet_api.store.entities import STORED_VALUE_COLUMNS, StoredValue
from ratchet_store_sql import schema as s
from ratchet_store_sql._base import SqlBase

J = s.jobs
A = s.archived_jobs
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


def _check_column(value: StoredValue) -> None:
    if value.column not in STORED_VALUE_COLUMNS:
        raise StoreDataError(
            "column", f"{value.column!r} is not one of {', '.join(STORED_VALUE_COLUMNS)}"
        )


def _replacement(value: StoredValue, new_text: str) -> sa.Update:
    _check_column(value)
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


class SealedArchiveOperations(SqlBase):
    def scan_archived_values(self, after: UUID | None, limit: int) -> list[StoredValue]:
        if limit < 1:
            raise StoreDataError("limit", f"must be at least 1, got {limit}")
        query = sa.select(
            A.c.id, A.c.payload, A.c.result, A.c.last_error, A.c.signal_payload, A.c.state
        ).order_by(A.c.id)
        if after is not None:
            query = query.where(A.c.id > after)
        values: list[StoredValue] = []
        with self._read("scan_archived_values") as conn:
            rows = list(conn.execute(query.limit(limit)))
            if not rows:
                return values
            conditions = dict(
                conn.execute(
                    sa.select(WC.c.child_job_id, WC.c.expression).where(
                        WC.c.child_job_id.in_([row[0] for row in rows]),
                        WC.c.expression.is_not(None),
                    )
                ).all()
            )
        for row in rows:
            job_id = row[0]
            for column, text in zip(_JOB_COLUMNS, row[1:5], strict=True):
                if text is not None:
                    values.append(StoredValue(job_id=job_id, column=column, text=text))
            for namespace, entry in sorted(_archived_states(job_id, row[5]).items()):
                values.append(
                    StoredValue(
                        job_id=job_id, column="state", namespace=namespace, text=entry["json"]
                    )
                )
            if job_id in conditions:
                values.append(
                    StoredValue(job_id=job_id, column="condition", text=conditions[job_id])
                )
        return values

    def replace_archived_values(self, changes: Sequence[tuple[StoredValue, str]]) -> int:
        for value, _ in changes:
            _check_column(value)
        if not changes:
            return 0
        states: dict[UUID, list[tuple[StoredValue, str]]] = {}
        written = 0
        with self._write("replace_archived_values") as conn:
            for value, new_text in changes:
                if value.column == "state":
                    states.setdefault(value.job_id, []).append((value, new_text))
                else:
                    written += conn.execute(_archived_replacement(value, new_text)).rowcount
            for job_id, job_changes in states.items():
                written += _replace_archived_states(conn, job_id, job_changes)
        return written


def _archived_states(job_id: UUID, text: str | None) -> dict[str, dict[str, Any]]:
    """The state an archived job was archived with, per namespace."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        raise StoreDataError("state", "archived value is not JSON", job_id=job_id) from None
    if not isinstance(value, dict):
        raise StoreDataError("state", "archived state is not a JSON object", job_id=job_id)
    return value


def _archived_replacement(value: StoredValue, new_text: str) -> sa.Update:
    if value.column == "condition":
        # only the condition of an archived child (a live child's is SealedValueStore's)
        return (
            sa.update(WC)
            .where(
                WC.c.child_job_id == value.job_id,
                WC.c.expression == value.text,
                sa.exists().where(A.c.id == value.job_id),
            )
            .values(expression=new_text)
        )
    column = A.c[value.column]
    return (
        sa.update(A)
        .where(A.c.id == value.job_id, column == value.text)
        .values({value.column: new_text})
    )


def _replace_archived_states(
    conn: sa.Connection, job_id: UUID, changes: Sequence[tuple[StoredValue, str]]
) -> int:
    """Rewrite the namespaces of one archived job's state whose text is still the expected one,
    as one compare and set of the whole JSON object (versions kept)."""
    stored = conn.execute(sa.select(A.c.state).where(A.c.id == job_id)).scalar_one_or_none()
    if stored is None:
        return 0
    states = _archived_states(job_id, stored)
    applied = 0
    for value, new_text in changes:
        entry = states.get(value.namespace)
        if isinstance(entry, dict) and entry.get("json") == value.text:
            states[value.namespace] = {**entry, "json": new_text}
            applied += 1
    if not applied:
        return 0
    result = conn.execute(
        sa.update(A)
        .where(A.c.id == job_id, A.c.state == stored)
        .values(state=json.dumps(states, sort_keys=True))
    )
    return applied if result.rowcount == 1 else 0


__all__ = ["SealedArchiveOperations", "SealedValueOperations"]
