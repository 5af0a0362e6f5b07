"""The small protocol the authoring modules create jobs through (:class:`Submitter`): the job
builder, batch and streaming-batch builders, workflow plans and the recurring service depend on
it, never on the scheduler or the pipeline's internals. :class:`ratchet_core.enqueue.pipeline.
EnqueuePipeline` implements it (see ``docs/enqueue-pipeline.md``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from ratchet_api.errors import InvalidJobError
from ratchet_api.model import JobInvocation
from ratchet_api.store.entities import JobEntity
from ratchet_api.store.protocols import JobStore
from ratchet_api.workflow import PARENT_ERROR, PARENT_RESULT
from ratchet_core.enqueue.invocation import PLACEHOLDER_KEY
from ratchet_core.enqueue.options import JobOptions
from ratchet_core.payload.codec import PayloadCodec


def refuse_parent_placeholders(invocation: JobInvocation) -> None:
    """``InvalidJobError`` when a job without a parent asks for its parent's outcome."""
    for name, value in invocation.kwargs.items():
        kind = value.get(PLACEHOLDER_KEY) if type(value) is dict else None
        if kind in (PARENT_RESULT.kind, PARENT_ERROR.kind):
            raise InvalidJobError(
                f"cannot enqueue {invocation.target}: parameter {name!r} asks for a parent's "
                "outcome, but this job has no parent (it is not a step after `then`, a branch "
                "side or a callback)"
            )


class Submitter(Protocol):
    """What the authoring modules (job builder, batch builders, workflow plans) need to create
    jobs: the steps of the enqueue pipeline, nothing of the scheduler's internals."""

    @property
    def store(self) -> JobStore:
        """The job store (capabilities: batches, conditions, signals, properties)."""
        ...

    @property
    def codec(self) -> PayloadCodec:
        """Seals and opens protected values."""
        ...

    def resolve(
        self, fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]
    ) -> JobInvocation:
        """The checked invocation of ``fn`` with these arguments (nothing stored)."""
        ...

    def resolve_many(
        self, fn: Callable[..., Any], items: Sequence[Sequence[Any]]
    ) -> list[JobInvocation]:
        """One checked invocation per argument tuple (the target vetted once)."""
        ...

    def check_invocation(self, invocation: Any) -> JobInvocation:
        """A prepared invocation after the checks a worker applies at dispatch."""
        ...

    def check_predicate(self, function: Callable[..., bool], args: Sequence[Any]) -> JobInvocation:
        """The stored form of a branch predicate with its arguments, checked."""
        ...

    def check_condition(self, invocation: JobInvocation) -> JobInvocation:
        """A prepared predicate invocation, checked as :meth:`check_predicate` checks one."""
        ...

    def condition_value(self, option: str, value: Any) -> Any:
        """``value`` of an ``equals``/``one_of`` condition as JSON data, its classes checked."""
        ...

    def new_ids(self, count: int) -> list[UUID]:
        """``count`` fresh job ids, in ascending order."""
        ...

    def entity(
        self,
        invocation: JobInvocation,
        options: JobOptions,
        now: datetime,
        *,
        job_id: UUID | None = None,
        **extra: Any,
    ) -> JobEntity:
        """One job to write (see :meth:`entities`); ``job_id``: its final id, else a new one."""
        ...

    def entities(
        self,
        invocations: Sequence[JobInvocation],
        options: JobOptions,
        now: datetime,
        *,
        ids: Sequence[UUID] | None = None,
        **extra: Any,
    ) -> list[JobEntity]:
        """The jobs to write, each authorized, serialized, stamped and sealed under its final
        id (``ids``, or fresh ones); ``extra`` sets further entity fields of every job."""
        ...

    def seal_condition(self, expression: str, child: JobEntity) -> str:
        """A workflow condition of ``child`` as stored: sealed under ``PREDICATE`` and the
        child's id when the child is encrypted."""
        ...

    def submit(self, invocation: JobInvocation, options: JobOptions) -> UUID:
        """Write one checked job; its id (the first job's when its idempotency key was used)."""
        ...

    def submit_many(self, invocations: Sequence[JobInvocation], options: JobOptions) -> list[UUID]:
        """Write checked jobs with one bulk insert (all or none); their ids."""
        ...

    def store_for(self, transaction: object | None) -> JobStore:
        """The store, joined to the caller's transaction when one is given."""
        ...

    def enqueue_span(self, target: str, count: int = 1) -> AbstractContextManager[None]:
        """The tracing span of an enqueue (entities built inside carry its context)."""
        ...

    def after_write(self, options: JobOptions, job: JobEntity) -> None:
        """Wake workers for ``job`` once it is visible (after the caller's commit)."""
        ...

    def after_commit(self, action: Callable[[], None], transaction: object | None) -> None:
        """Run ``action`` once ``transaction`` committed (at once without one)."""
        ...

    def wake(self, priority: int, execution_target: str | None) -> None:
        """Wake local listeners and the cluster for work that is due now."""
        ...

    def signal_waiting(self, job: JobEntity) -> None:
        """Count a job that now waits for a signal (metrics)."""
        ...

    def seal_fired(self, job: JobEntity, template_invocation: str, recurring_id: str) -> JobEntity:
        """A job fired by a recurring definition, sealed as every job is."""
        ...

    def seal_template(self, invocation: JobInvocation, recurring_id: str) -> str:
        """The stored invocation of a recurring definition's template."""
        ...


__all__ = ["Submitter", "refuse_parent_placeholders"]
