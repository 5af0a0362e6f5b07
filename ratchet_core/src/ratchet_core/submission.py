"""``DefaultInvocationSubmissionService``: prepared invocations through the builders' path.

``enqueue_invocation``/``schedule_invocation`` return the scheduler's own builder over the
invocation, so every option, check and side effect of ``scheduler.job(fn)`` applies
(validation at ``enqueue()``, idempotency, tags, properties, ``.encrypted()``, authorization,
wake-ups). Batches and workflow conditions are not part of this engine yet: those three
methods raise ``UnsupportedCapabilityError`` naming the missing feature rather than storing
something no worker would complete.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ratchet_api.errors import InvalidJobError, UnsupportedCapabilityError
from ratchet_api.model import JobInvocation
from ratchet_core.builder import DefaultJobBuilder
from ratchet_core.scheduler import SchedulerService


class DefaultInvocationSubmissionService:
    """Implements ``ratchet_api.InvocationSubmissionService`` over a ``SchedulerService``."""

    def __init__(self, scheduler: SchedulerService) -> None:
        self._scheduler = scheduler

    def enqueue_invocation(self, invocation: JobInvocation) -> DefaultJobBuilder:
        if not isinstance(invocation, JobInvocation):
            raise InvalidJobError(f"expected a JobInvocation, got {type(invocation).__name__}")
        return self._scheduler.invocation_job(invocation)

    def schedule_invocation(
        self, delay: timedelta | float, invocation: JobInvocation
    ) -> DefaultJobBuilder:
        return self.enqueue_invocation(invocation).delay(delay)

    def enqueue_invocation_batch(self, name: str) -> Any:
        raise UnsupportedCapabilityError("the batch engine", f"invocation batch {name!r}")

    def invocation_streaming_batch(self, name: str) -> Any:
        raise UnsupportedCapabilityError("the batch engine", f"streaming invocation batch {name!r}")

    def invocation_condition(self, invocation: JobInvocation) -> Any:
        raise UnsupportedCapabilityError(
            "workflow conditions", f"invocation condition on {invocation.target}"
        )


__all__ = ["DefaultInvocationSubmissionService"]
