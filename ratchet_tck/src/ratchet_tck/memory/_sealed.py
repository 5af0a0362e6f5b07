"""``SealedValueStore`` and ``SealedArchiveStore`` of the in-memory store."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

import attrs

from ratchet_api.errors import StoreDataError
from ratchet_api.model import VersionedState
from ratchet_api.store.entities import STORED_VALUE_COLUMNS, StoredValue
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
                job = s.jobs[job_id]
                for column in _JOB_COLUMNS:
                    text = getattr(job, column)
                    if text is not None:
                        values.append(StoredValue(job_id=job_id, column=column, text=text))
                for namespace, state in sorted(s.states.get(job_id, {}).items()):
                    values.append(
                        StoredValue(
                            job_id=job_id, column="state", namespace=namespace, text=state.json
                        )
                    )
                for condition in s.conditions:
                    if condition.child_job_id == job_id and condition.expression is not None:
                        values.append(
                            StoredValue(
                                job_id=job_id, column="condition", text=condition.expression
                            )
                        )
        return values

    def replace_values(self, changes: Sequence[tuple[StoredValue, str]]) -> int:
        for value, _ in changes:
            if value.column not in STORED_VALUE_COLUMNS:
                raise StoreDataError(
                    "column", f"{value.column!r} is not one of {', '.join(STORED_VALUE_COLUMNS)}"
                )
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
                for column in _JOB_COLUMNS:
                    text = getattr(archived.job, column)
                    if text is not None:
                        values.append(StoredValue(job_id=job_id, column=column, text=text))
                for namespace, state in sorted(archived.states.items()):
                    values.append(
                        StoredValue(
                            job_id=job_id, column="state", namespace=namespace, text=state.json
                        )
                    )
                for condition in s.conditions:
                    if condition.child_job_id == job_id and condition.expression is not None:
                        values.append(
                            StoredValue(
                                job_id=job_id, column="condition", text=condition.expression
                            )
                        )
        return values

    def replace_archived_values(self, changes: Sequence[tuple[StoredValue, str]]) -> int:
        for value, _ in changes:
            if value.column not in STORED_VALUE_COLUMNS:
                raise StoreDataError(
                    "column", f"{value.column!r} is not one of {', '.join(STORED_VALUE_COLUMNS)}"
                )
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


__all__ = ["MemorySealedValueMixin"]
