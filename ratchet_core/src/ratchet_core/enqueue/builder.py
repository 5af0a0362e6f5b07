"""The fluent job builder returned by ``SchedulerService.job(fn)``::

    job_id = (
        scheduler.job(send_invoice)
        .args(order_id)
        .priority(JobPriority.HIGH)
        .tags("billing")
        .max_retries(5)
        .backoff(BackoffPolicy.exponential(2.0))
        .idempotency_key(f"invoice-{order_id}")
        .delay(timedelta(minutes=5))
        .transaction(session)
        .enqueue()
    )

Every option is validated when it is set and raises ``InvalidJobError`` naming the option; the
target and its arguments are validated by ``enqueue()``. A builder is single-use and not thread
safe.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from ratchet_api.errors import InvalidJobError
from ratchet_api.model import BackoffPolicy, JobInvocation
from ratchet_api.store.entities import ConditionKind
from ratchet_api.workflow import Condition, SignalTimeout
from ratchet_core.enqueue.options import (
    JobOptions,
    JobOptionSetters,
    check_at,
    check_backoff,
    check_delay,
    check_key,
    parse_priority,
)
from ratchet_core.enqueue.properties import check_property
from ratchet_core.enqueue.submitter import Submitter
from ratchet_core.features.workflow.plan import Target, WorkflowPlan

JobSubmitter = Submitter
"""The name this protocol had before the enqueue pipeline (``ratchet_core.enqueue.pipeline``)."""


def _bad(option: str, message: str) -> InvalidJobError:
    return InvalidJobError(f"job option {option!r}: {message}")


class DefaultJobBuilder(JobOptionSetters):
    """Collects a job's target, arguments and options; ``enqueue()`` creates it."""

    def __init__(
        self,
        submitter: Submitter,
        target: Callable[..., Any] | None = None,
        invocation: JobInvocation | None = None,
    ) -> None:
        self._submitter = submitter
        self._target = target
        self._invocation = invocation
        self._args: tuple[Any, ...] = ()
        self._kwargs: dict[str, Any] = {}
        self._options = JobOptions()
        self._used = False
        self._plan: WorkflowPlan | None = None
        self._ids: list[UUID] = []

    def args(self, *args: Any) -> DefaultJobBuilder:
        """Positional arguments of the target (replaces earlier ones)."""
        self._require_target("args")
        self._args = args
        return self

    def kwargs(self, **kwargs: Any) -> DefaultJobBuilder:
        """Keyword arguments of the target (merged with earlier ones)."""
        self._require_target("kwargs")
        self._kwargs.update(kwargs)
        return self

    def backoff(self, policy: BackoffPolicy | float | timedelta | None) -> DefaultJobBuilder:
        """Delay between attempts: a ``BackoffPolicy`` or a fixed delay in seconds."""
        self._options.backoff = check_backoff(policy)
        return self

    def idempotency_key(self, key: str) -> DefaultJobBuilder:
        """Enqueueing again with the same key returns the first job's id (no second job)."""
        self._options.idempotency_key = check_key("idempotency_key", key)
        return self

    def execution_target(self, label: str) -> DefaultJobBuilder:
        """Only workers serving this execution target claim the job."""
        self._options.execution_target = check_key("execution_target", label)
        return self

    def delay(self, delay: float | timedelta) -> DefaultJobBuilder:
        """Run no earlier than ``delay`` (seconds or a timedelta) from now."""
        self._options.delay = check_delay(delay)
        self._options.run_at = None
        return self

    def at(self, when: datetime) -> DefaultJobBuilder:
        """Run no earlier than ``when`` (timezone-aware)."""
        self._options.run_at = check_at(when)
        self._options.delay = None
        return self

    # ------------------------------------------------------------ workflows (docs/workflows.md)

    def _workflow(self) -> WorkflowPlan:
        if self._plan is None:
            self._plan = WorkflowPlan(self._submitter)
        return self._plan

    def then(self, fn: Target, /, *args: Any, **kwargs: Any) -> DefaultJobBuilder:
        """Add a step that runs ``fn(*args, **kwargs)`` after the current step succeeded, and
        make it the current step (a ``ParentResult[T]`` parameter receives the result)."""
        self._workflow().then(fn, args, kwargs)
        return self

    def on_success(self, fn: Target, /, *args: Any, **kwargs: Any) -> DefaultJobBuilder:
        """A callback job that runs when the current step succeeded."""
        self._workflow().callback("on_success", ConditionKind.ON_SUCCESS, fn, args, kwargs)
        return self

    def on_failure(self, fn: Target, /, *args: Any, **kwargs: Any) -> DefaultJobBuilder:
        """A callback job that runs when the current step went to the dead letter (a
        ``ParentError`` parameter receives its sanitized error)."""
        self._workflow().callback("on_failure", ConditionKind.ON_FAILURE, fn, args, kwargs)
        return self

    def branch(
        self,
        condition: Condition,
        *,
        if_true: Target | None = None,
        if_false: Target | None = None,
    ) -> DefaultJobBuilder:
        """After the current step succeeded, run ``if_true`` when ``condition`` holds on its
        result, else ``if_false`` (a function or a ``Step``); the other side is cancelled. Ends
        the chain."""
        self._workflow().branch(condition, if_true, if_false)
        return self

    def await_signal(
        self,
        key: str,
        *,
        timeout: float | timedelta | None = None,
        on_timeout: SignalTimeout | str = SignalTimeout.FAIL,
    ) -> DefaultJobBuilder:
        """The current step waits for ``scheduler.signal(key or its id, payload)`` before it
        runs (a step after its parent is released); after ``timeout`` it fails, is cancelled or
        runs without a payload, as ``on_timeout`` says."""
        self._workflow().await_signal(key, timeout, on_timeout)
        return self

    @property
    def job_ids(self) -> list[UUID]:
        """After ``enqueue``: the ids of every job it created, root first, in declaration
        order (only the existing root's id when its idempotency key was used before)."""
        return list(self._ids)

    def encrypted(self) -> DefaultJobBuilder:
        """Encrypt this job's arguments, result, errors and state at rest (see
        docs/security.md). ``InvalidJobError`` when no encryption keys are configured."""
        self._submitter.codec.require_available("encrypted")
        self._options.encrypted = True
        return self

    def property(self, name: str, value: str) -> DefaultJobBuilder:
        """A write-once, plaintext, indexed property of the job (for queries and the masking
        policy, e.g. ``.property("ratchet.mask_fields", "iban")``). Needs the store's
        ``JobExtensionStore`` capability."""
        prop = check_property(self._submitter.store, self._options.properties, name, value)
        self._options.properties = (*self._options.properties, prop)
        return self

    def enqueue(self) -> UUID:
        """Validate the target and arguments and store the job (and its workflow); returns its
        id (the first job's id when the idempotency key was used before)."""
        if self._used:
            raise InvalidJobError("this job builder was already enqueued; start a new one")
        self._used = True
        submitter = self._submitter
        if self._invocation is not None:
            invocation = submitter.check_invocation(self._invocation)
        else:
            assert self._target is not None
            invocation = submitter.resolve(self._target, self._args, self._kwargs)
        if self._plan is not None:
            self._ids = self._plan.enqueue(invocation, self._options)
        else:
            self._ids = [submitter.submit(invocation, self._options)]
        return self._ids[0]

    def _require_target(self, option: str) -> None:
        if self._invocation is not None:
            raise _bad(option, "the arguments of a prepared JobInvocation cannot be changed")


__all__ = [
    "DefaultJobBuilder",
    "JobOptionSetters",
    "JobOptions",
    "JobSubmitter",
    "check_at",
    "check_backoff",
    "check_delay",
    "check_key",
    "parse_priority",
]
