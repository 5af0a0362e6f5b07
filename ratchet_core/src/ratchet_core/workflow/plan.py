"""The workflow part of a job builder: steps after the job, callbacks, branches, signal waits.

``DefaultJobBuilder`` keeps a :class:`WorkflowPlan` once one of ``then``, ``on_success``,
``on_failure``, ``branch`` or ``await_signal`` is used. Every step is checked when it is declared
(target, arguments, condition: ``InvalidJobError``/``ClassNotAllowedError`` there, never in a
worker). ``enqueue`` writes the whole workflow at once: the conditions, then every job in one
atomic ``bulk_insert`` (inside the caller's transaction when one is given). The root is PENDING
(or AWAITING_SIGNAL); every other job is WAITING for its parent with a condition row.

The *current step* starts as the root; ``then`` adds a step after it and makes that step
current; ``on_success``/``on_failure`` add callbacks to the current step; ``await_signal`` makes
the current step wait for a signal once it is released; ``branch`` adds the two sides after the
current step and ends the chain.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

import attrs

from ratchet_api.errors import ClassNotAllowedError, InvalidJobError, UnsupportedCapabilityError
from ratchet_api.ids import uuid7
from ratchet_api.model import JobInvocation, JobStatus, JobType, utc_now
from ratchet_api.store.entities import ConditionKind, JobEntity, WorkflowConditionEntity
from ratchet_api.store.protocols import SignalStore, WorkflowConditionStore
from ratchet_api.workflow import (
    PARENT_ERROR,
    PARENT_RESULT,
    Condition,
    ConditionTest,
    SignalTimeout,
    Step,
)
from ratchet_core.invocation import PLACEHOLDER_KEY
from ratchet_core.serialization import value_classes
from ratchet_core.workflow.meta import BranchTest, WorkflowMeta, encode_branch, encode_meta
from ratchet_core.workflow.settle import load_function

if TYPE_CHECKING:
    from ratchet_core.builder import JobOptions
    from ratchet_core.scheduler import SchedulerService

Target = Callable[..., Any] | Step | JobInvocation


def _bad(option: str, message: str) -> InvalidJobError:
    return InvalidJobError(f"job option {option!r}: {message}")


@attrs.define(kw_only=True)
class _Node:
    invocation: JobInvocation | None  # None: the root (resolved at enqueue)
    parent: int | None = None
    kind: ConditionKind = ConditionKind.ON_SUCCESS
    expression: str | None = None
    job_type: JobType = JobType.WORKFLOW_STEP
    signal_key: str | None = None
    signal_timeout: timedelta | None = None
    on_timeout: SignalTimeout = SignalTimeout.FAIL
    id: UUID = attrs.field(factory=uuid7)


class WorkflowPlan:
    """Steps declared on one builder (see the module docstring). Not thread safe."""

    def __init__(self, scheduler: SchedulerService) -> None:
        self._scheduler = scheduler
        self._nodes: list[_Node] = [_Node(invocation=None, job_type=JobType.STANDARD)]
        self._current = 0
        self._closed_by_branch = False

    # ------------------------------------------------------------ declaration

    def then(self, target: Target, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._open("then")
        invocation = self._invocation("then", target, args, kwargs)
        self._nodes.append(_Node(invocation=invocation, parent=self._current))
        self._current = len(self._nodes) - 1

    def callback(
        self,
        option: str,
        kind: ConditionKind,
        target: Target,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self._open(option)
        invocation = self._invocation(option, target, args, kwargs)
        self._nodes.append(
            _Node(invocation=invocation, parent=self._current, kind=kind, job_type=JobType.CALLBACK)
        )

    def branch(self, condition: Condition, if_true: Target | None, if_false: Target | None) -> None:
        self._open("branch")
        if not isinstance(condition, Condition):
            raise _bad(
                "branch",
                "the condition must be built with equals(...), one_of(...), predicate(fn) or "
                f"invocation_condition(...), got {condition!r}",
            )
        if if_true is None and if_false is None:
            raise _bad("branch", "give if_true, if_false or both")
        test = self._test(condition)
        for when, side in ((True, if_true), (False, if_false)):
            if side is None:
                continue
            invocation = self._invocation("branch", side, (), {})
            self._nodes.append(
                _Node(
                    invocation=invocation,
                    parent=self._current,
                    kind=ConditionKind.CUSTOM,
                    expression=encode_branch(attrs.evolve(test, when=when)),
                )
            )
        self._closed_by_branch = True

    def await_signal(
        self, key: str, timeout: float | timedelta | None, on_timeout: SignalTimeout | str
    ) -> None:
        from ratchet_core.builder import check_delay, check_key

        self._open("await_signal")
        node = self._nodes[self._current]
        if node.signal_key is not None:
            raise _bad("await_signal", "this step already waits for a signal")
        node.signal_key = check_key("await_signal", key)
        if timeout is not None:
            node.signal_timeout = check_delay(timeout)
            if node.signal_timeout <= timedelta(0):
                raise _bad("await_signal", f"timeout must be positive, got {timeout!r}")
        try:
            node.on_timeout = SignalTimeout(
                on_timeout.upper() if isinstance(on_timeout, str) else on_timeout
            )
        except ValueError:
            choices = ", ".join(t.value.lower() for t in SignalTimeout)
            raise _bad(
                "await_signal", f"on_timeout must be one of {choices}, got {on_timeout!r}"
            ) from None

    def _open(self, option: str) -> None:
        if self._closed_by_branch:
            raise _bad(option, "a branch ends the chain; declare the sides' steps before it")

    # ------------------------------------------------------------ checks

    def _invocation(
        self, option: str, target: Target, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> JobInvocation:
        s = self._scheduler
        if isinstance(target, JobInvocation):
            if args or kwargs:
                raise _bad(option, "a prepared JobInvocation carries its own arguments")
            return s._check_invocation(target)
        if isinstance(target, Step):
            if args or kwargs:
                raise _bad(option, "a Step carries its own arguments")
            return s._resolver.resolve(target.function, list(target.args), dict(target.kwargs))
        if not callable(target):
            raise _bad(option, f"expected a function, a Step or a JobInvocation, got {target!r}")
        return s._resolver.resolve(target, list(args), dict(kwargs))

    def _test(self, condition: Condition) -> BranchTest:
        s = self._scheduler
        if condition.test is ConditionTest.EQUALS:
            return BranchTest(test=condition.test, value=self._json("equals", condition.value))
        if condition.test is ConditionTest.ONE_OF:
            values = [self._json("one_of", v) for v in condition.value]
            return BranchTest(test=condition.test, value=values)
        if condition.test is ConditionTest.INVOCATION:
            assert condition.invocation is not None
            return BranchTest(test=condition.test, invocation=condition.invocation)
        assert condition.function is not None
        return BranchTest(
            test=ConditionTest.INVOCATION,
            invocation=predicate_invocation(s, condition.function, condition.args),
        )

    def _json(self, option: str, value: Any) -> Any:
        s = self._scheduler
        for name in value_classes(value):
            if not s._policy.is_allowed(name):
                raise ClassNotAllowedError(name, f"value of branch condition {option}")
        return s._serializer.to_json_value(value)

    # ------------------------------------------------------------ writing

    def enqueue(self, root: JobInvocation, options: JobOptions) -> list[UUID]:
        """Write the workflow; the ids of its jobs, root first (the existing root's id alone
        when its idempotency key was used before)."""
        s = self._scheduler
        refuse_parent_placeholders(root)
        store = s._store_for(options.transaction)
        conditions = store.capability(WorkflowConditionStore)
        if len(self._nodes) > 1 and conditions is None:
            raise UnsupportedCapabilityError("WorkflowConditionStore", "workflow steps")
        if any(n.signal_key for n in self._nodes) and store.capability(SignalStore) is None:
            raise UnsupportedCapabilityError("SignalStore", "await_signal")
        if options.idempotency_key is not None:
            existing = store.find_by_idempotency_key(options.idempotency_key)
            if existing is not None:
                return [existing.id]
        now = utc_now()
        parents = {n.parent for n in self._nodes if n.parent is not None}
        base = s._entity(root, options, now)
        jobs: list[JobEntity] = []
        rows: list[WorkflowConditionEntity] = []
        for index, node in enumerate(self._nodes):
            meta = WorkflowMeta(
                dependents=index in parents,
                signal_timeout=node.signal_timeout,
                on_timeout=node.on_timeout,
            )
            if node.parent is None:
                status = JobStatus.AWAITING_SIGNAL if node.signal_key else base.status
                deadline = None
                if node.signal_key and node.signal_timeout is not None:
                    deadline = now + node.signal_timeout
                jobs.append(
                    attrs.evolve(
                        base,
                        id=node.id,
                        status=status,
                        signal_key=node.signal_key,
                        signal_deadline=deadline,
                        workflow=encode_meta(meta),
                    )
                )
                continue
            assert node.invocation is not None
            parent = self._nodes[node.parent]
            child = s._entity(node.invocation, attrs.evolve(options, idempotency_key=None), now)
            jobs.append(
                attrs.evolve(
                    child,
                    id=node.id,
                    status=JobStatus.WAITING,
                    job_type=node.job_type,
                    parent_id=parent.id,
                    scheduled_at=now,
                    signal_key=node.signal_key,
                    workflow=encode_meta(meta),
                )
            )
            rows.append(
                WorkflowConditionEntity(
                    parent_job_id=parent.id,
                    child_job_id=node.id,
                    kind=node.kind,
                    expression=node.expression,
                    position=index,
                )
            )
        if rows:
            assert conditions is not None
            conditions.save_conditions(rows)  # first: a child never exists without its condition
        if len(jobs) == 1:
            stored = store.insert_job(jobs[0])
            if stored.id != jobs[0].id:
                return [stored.id]
        else:
            store.bulk_insert(jobs)
        root_job = jobs[0]
        if root_job.status is JobStatus.AWAITING_SIGNAL and root_job.signal_key is not None:
            s._metrics.signal_waiting(root_job.id, root_job.job_type, root_job.signal_key)
        elif root_job.status is JobStatus.PENDING:
            s._after_write(options, root_job)
        return [job.id for job in jobs]


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


def predicate_invocation(
    scheduler: SchedulerService, function: Callable[..., bool], args: tuple[Any, ...]
) -> JobInvocation:
    """A stored form of ``predicate(function, *args)``: checked as a job target is (importable,
    public, allowed by the ``ClassPolicy``), and static (a module-level function or a static
    method: no container instance)."""
    s = scheduler
    describe = getattr(s._resolver, "describe", None)
    if describe is None:
        raise InvalidJobError(
            f"{type(s._resolver).__name__} cannot check branch predicates (it needs describe())"
        )
    info = describe(function)
    if not info.static:
        raise InvalidJobError(
            f"branch predicate {info.target} must be a module-level function or static method"
        )
    if not s._policy.is_allowed(info.dotted):
        raise ClassNotAllowedError(info.dotted, "branch predicate")
    converted = []
    for value in args:
        for name in value_classes(value):
            if not s._policy.is_allowed(name):
                raise ClassNotAllowedError(name, f"argument of branch predicate {info.target}")
        converted.append(s._serializer.to_json_value(value))
    if len(args) >= len(info.parameters):
        raise InvalidJobError(
            f"branch predicate {info.target}{info.signature} takes the parent's JobResult as "
            f"its last argument: {len(args)} arguments leave no room for it"
        )
    return JobInvocation(
        module=info.module,
        qualname=info.qualname,
        static=True,
        signature=info.signature,
        args=tuple(converted),
    )


def check_condition_invocation(scheduler: SchedulerService, invocation: JobInvocation) -> None:
    """``invocation_condition``: the invocation must name an importable, allowed predicate."""
    if not isinstance(invocation, JobInvocation):
        raise InvalidJobError(f"expected a JobInvocation, got {type(invocation).__name__}")
    named = f"{invocation.module}.{invocation.qualname}"
    if not scheduler._policy.is_allowed(named):  # judged before importing anything
        raise ClassNotAllowedError(named, "branch predicate")
    try:
        function = load_function(invocation)
    except (ImportError, AttributeError) as exc:
        raise InvalidJobError(
            f"branch predicate {invocation.target} cannot be imported: {exc}"
        ) from exc
    predicate_invocation(scheduler, function, tuple(invocation.args))


__all__ = [
    "WorkflowPlan",
    "check_condition_invocation",
    "predicate_invocation",
    "refuse_parent_placeholders",
]
