"""Workflow conditions: the edges from a parent job to its children."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

import sqlalchemy as sa

from ratchet_api.store.entities import (
    WorkflowConditionEntity,
)
from ratchet_store_sql import schema as s
from ratchet_store_sql._base import SqlBase
from ratchet_store_sql._convert import (
    condition_to_row,
    row_to_condition,
)


class WorkflowOperations(SqlBase):
    def save_conditions(self, conditions: Sequence[WorkflowConditionEntity]) -> None:
        if not conditions:
            return
        rows = [condition_to_row(c) for c in conditions]
        with self._write("save_conditions") as conn:
            conn.execute(sa.insert(s.workflow_conditions), rows)

    def find_conditions_by_parent(self, parent_job_id: UUID) -> list[WorkflowConditionEntity]:
        w = s.workflow_conditions
        with self._read("find_conditions_by_parent") as conn:
            rows = conn.execute(
                sa.select(w).where(w.c.parent_job_id == parent_job_id).order_by(w.c.position)
            ).mappings()
            return [row_to_condition(r) for r in rows]

    def delete_conditions_by_parent(self, parent_job_id: UUID) -> int:
        w = s.workflow_conditions
        with self._write("delete_conditions_by_parent") as conn:
            return int(
                conn.execute(sa.delete(w).where(w.c.parent_job_id == parent_job_id)).rowcount
            )


__all__ = ["WorkflowOperations"]
