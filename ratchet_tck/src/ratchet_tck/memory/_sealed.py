"""``SealedValueStore`` and ``SealedArchiveStore`` of the in-memory store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from uuid import UUID

import attrs

from ratchet_api.errors import StoreDataError
from ratchet_api.model import VersionedState
from ratchet_api.store.entities import (
    STORED_VALUE_COLUMNS,
    JobEntity,
    StoredValue,
    WorkflowConditionEntity,
)
from ratchet_tck.memory._core import CoreMemoryStore

_JOB_COLUMNS = ("payload", "result", "last_error", "signal_payload")


class MemorySealedValueMixin(CoreMemoryStore):
    def scan_values(self, after: UUID | None, limit: int) -> list[StoredValue]:
        if limit < 1:
            raise StoreDataError("limit", f"must be at least 1, got {limit}")
        s = self._s
        values: list[StoredValue] = []
        with s.lock:
            ids = sorted(i for i in s.jobs if after is None or i > after)[:limit]
            for job_id in ids:
                values += _values_of(s.jobs[job_id], s.states.get(job_id, {}), s.conditions)
        return values

    def replace_values(self, changes: Sequence[tuple[StoredValue, str]]) -> int:
        _check_columns(changes)
        with self._s.lock:
            return sum(self._replace(value, new_text) for value, new_text in changes)

    def _replace(self, value: StoredValue, new_text: str) -> bool:
        s = self._s
        if value.column == "state":
            states = s.states.get(value.job_id, {})
            current = states.get(value.namespace)
            if current is None or current.json != value.text:
                return False
            states[value.namespace] = VersionedState(json=new_text, version=current.version)
            return True
        if value.column == "condition":
            for index, condition in enumerate(s.conditions):
                if condition.child_job_id == value.job_id and condition.expression == value.text:
                    s.conditions[index] = attrs.evolve(condition, expression=new_text)
                    return True
            return False
        job = s.jobs.get(value.job_id)
        if job is None or getattr(job, value.column) != value.text:
            return False
        s.jobs[job.id] = attrs.evolve(job, **{value.column: new_text})  # type: ignore[arg-type]
        return True

    def scan_archived_values(self, after: UUID | None, limit: int) -> list[StoredValue]:
        if limit < 1:
            raise StoreDataError("limit", f"must be at least 1, got {limit}")
        s = self._s
        values: list[StoredValue] = []
        with s.lock:
            ids = sorted(i for i in s.archive if after is None or i > after)[:limit]
            for job_id in ids:
                archived = s.archive[job_id]
                values += _values_of(archived.job, archived.states, s.conditions)
        return values

    def replace_archived_values(self, changes: Sequence[tuple[StoredValue, str]]) -> int:
        _check_columns(changes)
        with self._s.lock:
            return sum(self._replace_archived(value, new_text) for value, new_text in changes)

    def _replace_archived(self, value: StoredValue, new_text: str) -> bool:
        s = self._s
        archived = s.archive.get(value.job_id)
        if archived is None:
            return False
        if value.column == "condition":
            return self._replace(value, new_text)  # conditions are shared by live and archived
        if value.column == "state":
            current = archived.states.get(value.namespace)
            if current is None or current.json != value.text:
                return False
            archived.states[value.namespace] = VersionedState(
                json=new_text, version=current.version
            )
            return True
        if getattr(archived.job, value.column) != value.text:
            return False
        job = attrs.evolve(archived.job, **{value.column: new_text})  # type: ignore[arg-type]
        s.archive[value.job_id] = attrs.evolve(archived, job=job)
        return True


def _values_of(
    job: JobEntity,
    states: Mapping[str, VersionedState],
    conditions: Sequence[WorkflowConditionEntity],
) -> list[StoredValue]:
    """A job's sealed values in the contract's order: its columns, its state per namespace,
    then the condition that releases it (live and archived jobs alike)."""
    values = [
        StoredValue(job_id=job.id, column=column, text=text)
        for column in _JOB_COLUMNS
        if (text := getattr(job, column)) is not None
    ]
    values += [
        StoredValue(job_id=job.id, column="state", namespace=namespace, text=state.json)
        for namespace, state in sorted(states.items())
    ]
    values += [
        StoredValue(job_id=job.id, column="condition", text=condition.expression)
        for condition in conditions
        if condition.child_job_id == job.id and condition.expression is not None
    ]
    return values


def _check_columns(changes: Sequence[tuple[StoredValue, str]]) -> None:
    for value, _ in changes:
        if value.column not in STORED_VALUE_COLUMNS:
            raise StoreDataError(
                "column", f"{value.column!r} is not one of {', '.join(STORED_VALUE_COLUMNS)}"
            )


__all__ = ["MemorySealedValueMixin"]
