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
from typing import Any
from uuid import UUID

import attrs

from ratchet_api.errors import InvalidJobError, UnsupportedCapabilityError
from ratchet_api.ids import uuid7
from ratchet_api.model import JobInvocation, JobStatus, JobType, utc_now
from ratchet_api.store.entities import ConditionKind, JobEntity, WorkflowConditionEntity
from ratchet_api.store.protocols import SignalStore, WorkflowConditionStore
from ratchet_api.workflow import Condition, ConditionTest, SignalTimeout, Step
from ratchet_core.enqueue.options import JobOptions, check_delay, check_key
from ratchet_core.enqueue.submitter import Submitter, refuse_parent_placeholders
from ratchet_core.features.workflow.meta import BranchTest, WorkflowMeta, encode_branch, encode_meta

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

    def __init__(self, submitter: Submitter) -> None:
        self._submitter = submitter
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
        s = self._submitter
        if isinstance(target, JobInvocation):
            if args or kwargs:
                raise _bad(option, "a prepared JobInvocation carries its own arguments")
            return s.check_invocation(target)
        if isinstance(target, Step):
            if args or kwargs:
                raise _bad(option, "a Step carries its own arguments")
            return s.resolve(target.function, target.args, dict(target.kwargs))
        if not callable(target):
            raise _bad(option, f"expected a function, a Step or a JobInvocation, got {target!r}")
        return s.resolve(target, args, kwargs)

    def _test(self, condition: Condition) -> BranchTest:
        s = self._submitter
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
            invocation=s.check_predicate(condition.function, condition.args),
        )

    def _json(self, option: str, value: Any) -> Any:
        return self._submitter.condition_value(option, value)

    # ------------------------------------------------------------ writing

    def enqueue(self, root: JobInvocation, options: JobOptions) -> list[UUID]:
        """Write the workflow; the ids of its jobs, root first (the existing root's id alone
        when its idempotency key was used before). Every node is built by the enqueue
        pipeline under its final id (its payload sealed under it), and each branch condition
        is sealed under its child's id when the child is encrypted."""
        s = self._submitter
        refuse_parent_placeholders(root)
        store = s.store_for(options.transaction)
        conditions = store.capability(WorkflowConditionStore)
        if len(self._nodes) > 1 and conditions is None:
            raise UnsupportedCapabilityError("WorkflowConditionStore", "workflow steps")
        if any(n.signal_key for n in self._nodes) and store.capability(SignalStore) is None:
            raise UnsupportedCapabilityError("SignalStore", "await_signal")
        if options.idempotency_key is not None:
            existing = store.find_by_idempotency_key(options.idempotency_key)
            if existing is not None:
                return [existing.id]
        with s.enqueue_span(root.target, len(self._nodes)):
            jobs, rows = self._entities(root, options)
            if rows:
                assert conditions is not None
                conditions.save_conditions(rows)  # first: a child never exists without it
            if len(jobs) == 1:
                stored = store.insert_job(jobs[0])
                if stored.id != jobs[0].id:
                    return [stored.id]
            else:
                store.bulk_insert(jobs)
        root_job = jobs[0]
        if root_job.status is JobStatus.AWAITING_SIGNAL:
            s.signal_waiting(root_job)
        elif root_job.status is JobStatus.PENDING:
            s.after_write(options, root_job)
        return [job.id for job in jobs]

    def _entities(
        self, root: JobInvocation, options: JobOptions
    ) -> tuple[list[JobEntity], list[WorkflowConditionEntity]]:
        s = self._submitter
        now = utc_now()
        parents = {n.parent for n in self._nodes if n.parent is not None}
        child_options = attrs.evolve(options, idempotency_key=None)
        jobs: list[JobEntity] = []
        rows: list[WorkflowConditionEntity] = []
        for index, node in enumerate(self._nodes):
            meta = encode_meta(
                WorkflowMeta(
                    dependents=index in parents,
                    signal_timeout=node.signal_timeout,
                    on_timeout=node.on_timeout,
                )
            )
            if node.parent is None:
                deadline = None
                if node.signal_key and node.signal_timeout is not None:
                    deadline = now + node.signal_timeout
                extra: dict[str, Any] = {"signal_key": node.signal_key, "workflow": meta}
                if node.signal_key:
                    extra.update(status=JobStatus.AWAITING_SIGNAL, signal_deadline=deadline)
                jobs.append(s.entity(root, options, now, job_id=node.id, **extra))
                continue
            assert node.invocation is not None
            parent = self._nodes[node.parent]
            child = s.entity(
                node.invocation,
                child_options,
                now,
                job_id=node.id,
                status=JobStatus.WAITING,
                job_type=node.job_type,
                parent_id=parent.id,
                scheduled_at=now,
                signal_key=node.signal_key,
                workflow=meta,
            )
            jobs.append(child)
            expression = node.expression
            if expression is not None:
                expression = s.seal_condition(expression, child)
            rows.append(
                WorkflowConditionEntity(
                    parent_job_id=parent.id,
                    child_job_id=node.id,
                    kind=node.kind,
                    expression=expression,
                    position=index,
                )
            )
        return jobs, rows


def predicate_invocation(
    submitter: Submitter, function: Callable[..., bool], args: tuple[Any, ...]
) -> JobInvocation:
    """A stored form of ``predicate(function, *args)`` (``Submitter.check_predicate``)."""
    return submitter.check_predicate(function, args)


def check_condition_invocation(submitter: Submitter, invocation: JobInvocation) -> None:
    """``invocation_condition``: the invocation must name an importable, allowed predicate."""
    submitter.check_condition(invocation)


__all__ = [
    "WorkflowPlan",
    "check_condition_invocation",
    "predicate_invocation",
    "refuse_parent_placeholders",
]
