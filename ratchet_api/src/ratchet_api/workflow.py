"""Workflow and signal vocabulary: what a job's parameters, conditions and signal calls use.

* ``ParentResult[T]``, ``ParentError`` and ``SignalPayload[T]`` annotate parameters the worker
  fills in at dispatch (through the ``PreExecutionArgResolver``): the parent step's stored result
  restored as ``T``, the parent's sanitized error (``str | None``), and the payload of the signal
  the job waited for (``None`` without one). They are ``typing.Annotated`` aliases, so a type
  checker sees plain ``T``. Such a parameter is never passed at enqueue.
* ``Condition`` (``equals``, ``one_of``, ``predicate``) decides which side of a ``branch`` runs,
  on the parent's ``JobResult``.
* ``Step`` describes a job of a workflow that is not the root (``then``, ``branch`` sides).
* ``SignalTimeout`` says what happens to a job whose signal did not come in time, and
  ``SignalDecision`` is what ``JobScheduler.signal`` answers.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar
from uuid import UUID

import attrs

from ratchet_api.model import JobInvocation
from ratchet_api.spi.runtime import SignalOutcome

T = TypeVar("T")


@attrs.frozen
class LateBound:
    """Marker inside ``Annotated``: the worker supplies this parameter (``kind`` names what)."""

    kind: str


PARENT_RESULT = LateBound("parent-result")
PARENT_ERROR = LateBound("parent-error")
SIGNAL_PAYLOAD = LateBound("signal-payload")

ParentResult = Annotated[T, PARENT_RESULT]
"""``ParentResult[Order]``: the parent step's result restored as ``Order``."""
ParentError = Annotated[str | None, PARENT_ERROR]
"""The parent's sanitized error message (``None`` when it succeeded)."""
SignalPayload = Annotated[T, SIGNAL_PAYLOAD]
"""``SignalPayload[Approval]``: the payload of the delivered signal (``None`` on timeout)."""


class ConditionTest(enum.StrEnum):
    EQUALS = "EQUALS"
    ONE_OF = "ONE_OF"
    PREDICATE = "PREDICATE"
    INVOCATION = "INVOCATION"


@attrs.frozen(kw_only=True)
class Condition:
    """A branch condition on the parent's result. Build with :func:`equals`, :func:`one_of`,
    :func:`predicate` (or ``InvocationSubmissionService.invocation_condition``). A condition is
    true only when the parent SUCCEEDED and the test holds."""

    test: ConditionTest
    value: Any = None
    function: Callable[..., bool] | None = attrs.field(default=None, eq=False)
    args: tuple[Any, ...] = ()
    invocation: JobInvocation | None = None


def equals(value: Any) -> Condition:
    """True when the parent's result (as stored JSON) equals ``value`` (converted the same way)."""
    return Condition(test=ConditionTest.EQUALS, value=value)


def one_of(*values: Any) -> Condition:
    """True when the parent's result equals any of ``values``."""
    return Condition(test=ConditionTest.ONE_OF, value=tuple(values))


def predicate(function: Callable[..., bool], *args: Any) -> Condition:
    """True when ``function(*args, result)`` returns True, ``result`` being the parent's
    ``JobResult`` (its ``value`` is the decoded JSON result). ``function`` must be an importable,
    public module-level function (or static method) returning ``bool``; ``args`` are stored as
    JSON. It may run more than once for one parent (after a crash): keep it pure."""
    return Condition(test=ConditionTest.PREDICATE, function=function, args=tuple(args))


@attrs.frozen(init=False)
class Step:
    """A job of a workflow given as a target and its arguments: ``Step(notify, user_id)``."""

    function: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]

    def __init__(self, function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> None:
        self.__attrs_init__(function, tuple(args), dict(kwargs))


class SignalTimeout(enum.StrEnum):
    """What happens when a job's signal does not arrive before its timeout."""

    FAIL = "FAIL"
    """The job goes to the dead letter with a ``SignalTimeout`` error (its ``on_failure``
    callbacks run)."""
    CANCEL = "CANCEL"
    """The job is cancelled (its children are cancelled with the reason)."""
    RUN = "RUN"
    """The job runs without a payload (``SignalPayload`` parameters receive ``None``)."""


@attrs.frozen(kw_only=True)
class SignalDecision:
    """The answer of ``JobScheduler.signal``: ``outcome`` is DELIVERED when this call delivered
    to at least one job, else the reason it did not (the first job's); ``jobs`` holds the
    outcome for each job the id or key named."""

    target: str
    outcome: SignalOutcome
    jobs: Mapping[UUID, SignalOutcome] = attrs.field(factory=dict)

    @property
    def delivered(self) -> bool:
        return self.outcome is SignalOutcome.DELIVERED

    @property
    def delivered_to(self) -> tuple[UUID, ...]:
        return tuple(j for j, o in self.jobs.items() if o is SignalOutcome.DELIVERED)


__all__ = [
    "PARENT_ERROR",
    "PARENT_RESULT",
    "SIGNAL_PAYLOAD",
    "Condition",
    "ConditionTest",
    "LateBound",
    "ParentError",
    "ParentResult",
    "SignalDecision",
    "SignalPayload",
    "SignalTimeout",
    "Step",
    "equals",
    "one_of",
    "predicate",
]
