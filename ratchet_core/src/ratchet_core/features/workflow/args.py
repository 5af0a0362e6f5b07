"""``WorkflowArgResolver``: the default ``PreExecutionArgResolver``.

Parameters annotated ``ParentResult[T]``, ``ParentError`` or ``SignalPayload[T]`` were stored as
placeholders at enqueue (see :mod:`ratchet_core.enqueue.invocation`). Right before dispatch this
resolver replaces each placeholder with the stored JSON it stands for: the parent's result, the
parent's sanitized error, the job's signal payload (each opened when it is stored sealed). The
worker then restores the value from the parameter's type as for any argument. An invocation without placeholders costs nothing (no store
read). To add your own late binding, extend this class and call ``super().resolve_arguments``.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

import attrs

from ratchet_api.errors import PayloadError
from ratchet_api.model import JobInvocation
from ratchet_api.store.entities import JobEntity
from ratchet_api.store.protocols import ArchiveStore, JobStore
from ratchet_api.workflow import PARENT_ERROR, PARENT_RESULT, SIGNAL_PAYLOAD
from ratchet_core.enqueue.invocation import PLACEHOLDER_KEY
from ratchet_core.payload.codec import PayloadCodec


def _kind(value: Any) -> str | None:
    if type(value) is dict and len(value) == 1:
        kind = value.get(PLACEHOLDER_KEY)
        if isinstance(kind, str):
            return kind
    return None


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


class WorkflowArgResolver:
    """Fills late-bound workflow arguments from the store. Thread safe."""

    def __init__(self, store: JobStore, codec: PayloadCodec | None = None) -> None:
        self._store = store
        self._archive = store.capability(ArchiveStore)
        # opens what an encrypted job stores sealed: its signal payload, its parent's outcome
        self._codec = codec if codec is not None else PayloadCodec.disabled()

    def needs_store(self, invocation: JobInvocation) -> bool:
        """Whether :meth:`resolve_arguments` reads the store for ``invocation`` (it has
        late-bound arguments). Cheap: the worker asks it for every ``async def`` job, and
        resolves the arguments off the event loop when it says True. A subclass that reads
        the store in other cases overrides this too."""
        return any(_kind(v) is not None for v in invocation.kwargs.values())

    def resolve_arguments(self, job_id: UUID, invocation: JobInvocation) -> JobInvocation | None:
        late = {k: kind for k, v in invocation.kwargs.items() if (kind := _kind(v)) is not None}
        if not late:
            return None
        job = self._store.find_by_id(job_id)
        if job is None:
            raise PayloadError(f"job {job_id} vanished before its arguments were resolved")
        parent: JobEntity | None = None
        kwargs = dict(invocation.kwargs)
        for name, kind in late.items():
            if kind == SIGNAL_PAYLOAD.kind:
                kwargs[name] = _json(self._codec.open_signal_payload(job))
                continue
            if kind not in (PARENT_RESULT.kind, PARENT_ERROR.kind):
                raise PayloadError(f"job {job_id}: unknown placeholder {kind!r} for {name!r}")
            if parent is None:
                parent = self._parent(job, name)
            if kind == PARENT_RESULT.kind:
                kwargs[name] = _json(self._codec.open_result(parent))
            elif parent.status.value == "SUCCEEDED":
                kwargs[name] = None
            else:
                kwargs[name] = self._codec.open_error(parent)
        return attrs.evolve(invocation, kwargs=kwargs)

    def _parent(self, job: JobEntity, name: str) -> JobEntity:
        if job.parent_id is None:
            raise PayloadError(
                f"job {job.id}: parameter {name!r} asks for the parent's outcome, but the job "
                "has no parent (use it on a step added with then/branch/on_success/on_failure)"
            )
        parent = self._store.find_by_id(job.parent_id)
        if parent is None and self._archive is not None:
            parent = self._archive.find_archived_job(job.parent_id)
        if parent is None:
            raise PayloadError(f"job {job.id}: its parent job {job.parent_id} no longer exists")
        return parent


__all__ = ["WorkflowArgResolver"]
