"""``DefaultInvocationSubmissionService``: prepared invocations through the builders' path.

Every method returns (or delegates to) the scheduler's own builders, so every option, check
and side effect of ``scheduler.job(fn)``, ``scheduler.batch(name)``,
``scheduler.streaming_batch(...)`` and ``scheduler.invocation_condition(...)`` applies
(validation at ``enqueue()``, idempotency, tags, properties, ``.encrypted()``, authorization,
wake-ups, batch completion and callbacks, workflow condition rows).
"""

from __future__ import annotations

from datetime import timedelta

from ratchet_api.errors import InvalidJobError
from ratchet_api.model import JobInvocation
from ratchet_api.workflow import Condition
from ratchet_core.enqueue.builder import DefaultJobBuilder
from ratchet_core.enqueue.scheduler import SchedulerService
from ratchet_core.features.batches import BatchBuilder
from ratchet_core.features.streaming import InvocationStreamingBatchBuilder


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

    def enqueue_invocation_batch(self, name: str) -> BatchBuilder:
        """``scheduler.batch(name)``: ``add(invocation)`` / ``add_invocations(...)`` children,
        ``on_success(invocation)`` (and ``on_failure``/``on_complete``) callbacks; each is
        checked by ``enqueue()`` as ``enqueue_invocation`` checks one."""
        return self._scheduler.batch(name)

    def invocation_streaming_batch(self, name: str) -> InvocationStreamingBatchBuilder:
        """A streaming batch whose ``.items(items, factory)`` factory returns a
        ``JobInvocation`` per item."""
        return self._scheduler.invocation_streaming_batch(name)

    def invocation_condition(self, invocation: JobInvocation) -> Condition:
        """``scheduler.invocation_condition(invocation)`` (for ``.branch(...)``)."""
        return self._scheduler.invocation_condition(invocation)


__all__ = ["DefaultInvocationSubmissionService"]
