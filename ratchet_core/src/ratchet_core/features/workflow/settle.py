"""Settling the children of a finished job: which step runs, which is cancelled and why.

A child waits (WAITING) for its parent with a condition (``WorkflowConditionStore``): ON_SUCCESS
(``then`` steps and ``on_success`` callbacks), ON_FAILURE (``on_failure`` callbacks: the parent
went to the dead letter), ALWAYS, or CUSTOM (a ``branch`` side: a test of the parent's result).
Once the parent is terminal, :meth:`WorkflowSettler.settle` decides every WAITING child and
applies all decisions with one atomic ``settle_children``: released children become PENDING (or
AWAITING_SIGNAL when they wait for a signal), the others CANCELLED with the reason. A cancelled
child's own children are then settled the same way (their parent is cancelled), so a chain of
any length is cancelled to its end.

Settling is idempotent: a child that is no longer WAITING is left alone by the store, so the
worker (right after a parent's outcome is written) and the maintenance sweep (for parents whose
settling was lost to a crash) may both settle one parent. Branch tests must be pure: they may run
more than once.
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Callable
from typing import Any
from uuid import UUID

import attrs

from ratchet_api.errors import ClassNotAllowedError, InvalidTargetError
from ratchet_api.model import JobInvocation, JobResult, JobStatus
from ratchet_api.spi import ClassPolicy, ErrorSanitizer, MetricsCollector, PayloadSerializer
from ratchet_api.store.entities import (
    ChildSettlement,
    ConditionKind,
    JobEntity,
    WorkflowConditionEntity,
)
from ratchet_api.store.protocols import ArchiveStore, JobStore, WorkflowConditionStore
from ratchet_api.workflow import ConditionTest
from ratchet_core.features.workflow.meta import (
    BranchTest,
    decode_branch,
    decode_meta,
    has_dependents,
)
from ratchet_core.payload.codec import PayloadCodec

_log = logging.getLogger("ratchet.workflow")


@attrs.frozen
class Settled:
    """What one ``settle`` call moved (children already settled elsewhere are not listed)."""

    released: tuple[UUID, ...] = ()
    cancelled: tuple[UUID, ...] = ()


class WorkflowSettler:
    """Decides and applies the settlement of a parent's children. Thread safe."""

    def __init__(
        self,
        store: JobStore,
        *,
        resolver: Any,
        class_policy: ClassPolicy,
        serializer: PayloadSerializer,
        sanitizer: ErrorSanitizer | None,
        metrics: MetricsCollector,
        codec: PayloadCodec | None = None,
    ) -> None:
        self._store = store
        self._conditions = store.capability(WorkflowConditionStore)
        self._archive = store.capability(ArchiveStore)
        self._resolver = resolver
        self._policy = class_policy
        self._serializer = serializer
        self._sanitizer = sanitizer
        self._metrics = metrics
        # opens an encrypted parent's result and error and its children's sealed conditions
        self._codec = codec if codec is not None else PayloadCodec.disabled()

    def settle(self, parent_id: UUID, known: JobEntity | None = None) -> Settled:
        """Settle the WAITING children of ``parent_id`` if it is terminal (or gone), then the
        children of every child this cancelled. ``known``: the parent as its outcome was just
        written (saves reading it back). Returns what moved."""
        released: list[UUID] = []
        cancelled: list[UUID] = []
        todo = [parent_id]
        while todo:
            current = todo.pop()
            snapshot = known if known is not None and known.id == current else None
            outcome = self._settle_one(current, snapshot)
            released.extend(outcome.released)
            cancelled.extend(outcome.cancelled)
            todo.extend(outcome.cancelled)
        return Settled(tuple(released), tuple(cancelled))

    def _parent(self, parent_id: UUID) -> JobEntity | None:
        parent = self._store.find_by_id(parent_id)
        if parent is None and self._archive is not None:
            parent = self._archive.find_archived_job(parent_id)
        return parent

    def _settle_one(self, parent_id: UUID, known: JobEntity | None) -> Settled:
        children = [
            c for c in self._store.find_children(parent_id) if c.status is JobStatus.WAITING
        ]
        if not children:
            return Settled()
        parent = known if known is not None else self._parent(parent_id)
        if parent is not None and not parent.status.is_terminal:
            return Settled()
        conditions: dict[UUID, WorkflowConditionEntity] = {}
        if self._conditions is not None:
            conditions = {
                c.child_job_id: c for c in self._conditions.find_conditions_by_parent(parent_id)
            }
        tests: dict[str, bool | str] = {}
        settlements: list[ChildSettlement] = []
        now = None
        for child in children:
            reason = self._decide(parent_id, parent, conditions.get(child.id), tests)
            if reason is not None:
                settlements.append(
                    ChildSettlement(child_id=child.id, status=JobStatus.CANCELLED, reason=reason)
                )
            elif child.signal_key is not None:
                meta = decode_meta(child.workflow)
                deadline = None
                if meta.signal_timeout is not None:
                    now = now or self._store.server_now()
                    deadline = now + meta.signal_timeout
                settlements.append(
                    ChildSettlement(
                        child_id=child.id,
                        status=JobStatus.AWAITING_SIGNAL,
                        signal_deadline=deadline,
                    )
                )
            else:
                settlements.append(ChildSettlement(child_id=child.id, status=JobStatus.PENDING))
        moved = self._store.settle_children(parent_id, settlements)
        by_id = {c.id: c for c in children}
        released: list[UUID] = []
        cancelled: list[UUID] = []
        for item in settlements:
            if item.child_id not in moved:
                continue
            child = by_id[item.child_id]
            if item.status is JobStatus.CANCELLED:
                if has_dependents(child.workflow):
                    cancelled.append(child.id)
                _log.info("workflow step %s cancelled: %s", child.id, item.reason)
            else:
                released.append(child.id)
                if item.status is JobStatus.AWAITING_SIGNAL and child.signal_key is not None:
                    self._metrics.signal_waiting(child.id, child.job_type, child.signal_key)
        return Settled(tuple(released), tuple(cancelled))

    # ------------------------------------------------------------ decisions

    def _decide(
        self,
        parent_id: UUID,
        parent: JobEntity | None,
        condition: WorkflowConditionEntity | None,
        tests: dict[str, bool | str],
    ) -> str | None:
        """None to release the child, else the reason it is cancelled."""
        if parent is None:
            return f"parent job {parent_id} no longer exists"
        kind = condition.kind if condition is not None else ConditionKind.ON_SUCCESS
        status = parent.status
        if status is JobStatus.CANCELLED:
            return f"parent job {parent_id} was cancelled"
        if kind is ConditionKind.ALWAYS:
            return None
        if status is JobStatus.FAILED:
            if kind is ConditionKind.ON_FAILURE:
                return None
            if self._codec.is_encrypted(parent):
                # its error is sealed: the child's plaintext reason must not repeat it
                return f"parent job {parent_id} failed (its error is stored encrypted)"
            return f"parent job {parent_id} failed: {parent.last_error or 'no error recorded'}"
        # SUCCEEDED
        if kind is ConditionKind.ON_FAILURE:
            return f"parent job {parent_id} succeeded (on_failure not needed)"
        if kind is ConditionKind.ON_SUCCESS:
            return None
        assert condition is not None
        text = condition.expression or ""
        try:
            text = self._codec.open_condition(text, condition.child_job_id)
            branch = decode_branch(text, parent_id)
        except Exception as exc:  # noqa: BLE001 - an unreadable condition cancels its child
            return f"branch condition unreadable: {exc}"
        key = (
            text
            if branch.invocation is None
            else json.dumps(
                [branch.test.value, branch.value, branch.invocation.target, branch.invocation.args]
            )
        )
        answer = tests.get(key)
        if answer is None:
            answer = tests[key] = self._evaluate(branch, parent)
        if isinstance(answer, str):
            return answer
        if answer == branch.when:
            return None
        return f"branch not taken: the condition on parent job {parent_id} was {answer}"

    def _evaluate(self, branch: BranchTest, parent: JobEntity) -> bool | str:
        """The test's answer, or the reason it could not be answered."""
        try:
            stored = self._codec.open_result(parent)
        except Exception as exc:  # noqa: BLE001 - an unreadable result cancels both sides
            return f"the result of parent job {parent.id} cannot be read: {exc}"
        try:
            value = json.loads(stored) if stored else None
        except ValueError:
            value = stored
        if branch.test is ConditionTest.EQUALS:
            return bool(value == branch.value)
        if branch.test is ConditionTest.ONE_OF:
            return value in (branch.value or [])
        assert branch.invocation is not None
        result = JobResult(
            job_id=parent.id,
            status=parent.status,
            value=value,
            error=None,
            finished_at=parent.finished_at,
        )
        try:
            function, args = self._load_predicate(branch.invocation)
            answer = function(*args, result)
        except Exception as exc:  # noqa: BLE001 - a failing test cancels both sides
            message = self._sanitizer.sanitize(exc) if self._sanitizer else repr(exc)
            _log.warning(
                "branch condition %s of job %s raised: %s",
                branch.invocation.target,
                parent.id,
                message,
            )
            return f"branch condition {branch.invocation.target} raised: {message}"
        if not isinstance(answer, bool):
            return (
                f"branch condition {branch.invocation.target} returned "
                f"{type(answer).__name__}, not bool"
            )
        return answer

    def _load_predicate(self, invocation: JobInvocation) -> tuple[Callable[..., Any], list[Any]]:
        """Import the stored predicate again and repeat the enqueue checks (public, importable,
        allowed by the ``ClassPolicy``, same parameters); arguments restored from its hints."""
        named = f"{invocation.module}.{invocation.qualname}"
        if not self._policy.is_allowed(named):  # judged before importing anything
            raise ClassNotAllowedError(named, "branch condition")
        function = load_function(invocation)
        info = self._resolver.describe(function)
        if not self._policy.is_allowed(info.dotted):
            raise ClassNotAllowedError(info.dotted, "branch condition")
        if invocation.signature and info.signature != invocation.signature:
            raise InvalidTargetError(
                f"branch condition {invocation.target} changed its parameters since the "
                f"workflow was enqueued: stored {invocation.signature}, now {info.signature}"
            )
        args: list[Any] = []
        for param, raw in zip(info.parameters, invocation.args, strict=False):
            args.append(self._serializer.from_json_value(raw, info.hints.get(param.name, Any)))
        return info.call, args


def load_function(invocation: JobInvocation) -> Callable[..., Any]:
    """The function an invocation names (module attribute or static method)."""
    holder: Any = importlib.import_module(invocation.module)
    for part in invocation.qualname.split("."):
        holder = getattr(holder, part)
    if not callable(holder):
        raise InvalidTargetError(f"{invocation.target} is not callable")
    return holder  # type: ignore[no-any-return]


__all__ = ["Settled", "WorkflowSettler", "load_function"]
