"""The user-facing scheduler facade and the context a running job can ask for."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable
from uuid import UUID

from ratchet_api.model import JobInvocation, JobResult
from ratchet_api.spi.runtime import JobLogger
from ratchet_api.store.entities import JobEntity, JobQuery


@runtime_checkable
class JobContext(Protocol):
    """Handed to a job that declares a parameter annotated ``JobContext`` (the argument is not
    stored; the worker supplies it). Valid only during the execution it was created for."""

    @property
    def job_id(self) -> UUID: ...

    @property
    def attempt(self) -> int: ...

    @property
    def claim_seq(self) -> int: ...

    @property
    def logger(self) -> JobLogger: ...

    def get_state(self, namespace: str) -> Any:
        """The job's state in ``namespace`` (decoded JSON) or None."""
        ...

    def set_state(self, namespace: str, value: Any) -> bool:
        """Write fenced state; False means this attempt was superseded and should stop."""
        ...


@runtime_checkable
class JobScheduler(Protocol):
    """Enqueue, schedule and manage jobs. Thread safe.

    ``transaction`` (where accepted) is the caller's open transaction handle (a SQLAlchemy
    ``Connection`` or ``Session``, a pymongo ``ClientSession``): the job is written in it, so a
    rollback leaves no job, and wake-ups happen only after commit. Invalid targets or arguments
    raise ``InvalidJobError``/``ClassNotAllowedError`` here, never at run time.
    """

    def enqueue(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> UUID: ...

    def schedule(
        self,
        at_or_delay: datetime | timedelta | float,
        fn: Callable[..., Any],
        /,
        *args: Any,
        **kwargs: Any,
    ) -> UUID: ...

    def enqueue_invocation(
        self, invocation: JobInvocation, *, transaction: object | None = None
    ) -> UUID: ...

    def enqueue_many(
        self,
        fn: Callable[..., Any],
        arg_tuples: Sequence[Sequence[Any]],
        *,
        transaction: object | None = None,
    ) -> list[UUID]: ...

    def get(self, job_id: UUID) -> JobEntity | None: ...

    def result(self, job_id: UUID) -> JobResult: ...

    def search(self, query: JobQuery) -> list[JobEntity]: ...

    def cancel(self, job_id: UUID) -> bool: ...

    def retry(self, job_id: UUID) -> bool: ...

    def pause(self, job_id: UUID) -> bool: ...

    def resume(self, job_id: UUID) -> bool: ...


__all__ = ["JobContext", "JobScheduler"]
