"""A workflow as text and as data, for ``ratchet jobs show``: the tree from the root, each job
with its condition, status, and whether a branch side was taken."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from ratchet_api.model import JobStatus, JobType
from ratchet_api.store.entities import ConditionKind, JobEntity, WorkflowConditionEntity
from ratchet_api.store.protocols import JobStore, WorkflowConditionStore
from ratchet_api.workflow import ConditionTest
from ratchet_core.features.workflow.meta import decode_branch

MAX_DEPTH = 100
MAX_JOBS = 500


def _condition_label(job: JobEntity, condition: WorkflowConditionEntity | None) -> str:
    if condition is None:
        return "after"
    if condition.kind is ConditionKind.ON_FAILURE:
        return "on_failure"
    if condition.kind is ConditionKind.ALWAYS:
        return "always"
    if condition.kind is ConditionKind.ON_SUCCESS:
        return "on_success" if job.job_type is JobType.CALLBACK else "then"
    try:
        branch = decode_branch(condition.expression, condition.parent_job_id)
    except ValueError:
        return "branch (unreadable condition)"
    if branch.test is ConditionTest.EQUALS:
        test = f"result == {branch.value!r}"
    elif branch.test is ConditionTest.ONE_OF:
        test = f"result in {branch.value!r}"
    else:
        assert branch.invocation is not None
        test = f"{branch.invocation.target}(...)"
    return f"branch if {test} is {branch.when}"


def _branch_state(job: JobEntity, condition: WorkflowConditionEntity | None) -> str | None:
    if condition is None or condition.kind is not ConditionKind.CUSTOM:
        return None
    if job.status is JobStatus.WAITING:
        return "undecided"
    if job.status is JobStatus.CANCELLED and (job.last_error or "").startswith("branch not"):
        return "not taken"
    return "taken"


def workflow_of(store: JobStore, job: JobEntity) -> dict[str, Any] | None:
    """The workflow ``job`` belongs to as nested dicts from its root, or None when the job has
    no parent and no children."""
    root = job
    for _ in range(MAX_DEPTH):
        if root.parent_id is None:
            break
        parent = store.find_by_id(root.parent_id)
        if parent is None:
            break
        root = parent
    conditions = store.capability(WorkflowConditionStore)
    budget = [MAX_JOBS]

    def node(entity: JobEntity, condition: WorkflowConditionEntity | None) -> dict[str, Any]:
        budget[0] -= 1
        by_child: dict[UUID, WorkflowConditionEntity] = {}
        children = store.find_children(entity.id) if budget[0] > 0 else []
        if children and conditions is not None:
            by_child = {c.child_job_id: c for c in conditions.find_conditions_by_parent(entity.id)}
        data: dict[str, Any] = {
            "id": str(entity.id),
            "target": entity.target,
            "status": entity.status.value,
            "condition": None if entity is root else _condition_label(entity, condition),
            "branch": _branch_state(entity, condition),
            "signal_key": entity.signal_key,
            "reason": entity.last_error if entity.status is JobStatus.CANCELLED else None,
            "selected": entity.id == job.id,
            "children": [node(c, by_child.get(c.id)) for c in children if budget[0] > 0],
        }
        return data

    tree = node(root, None)
    if root.id == job.id and not tree["children"]:
        return None
    return tree


def draw(tree: dict[str, Any]) -> list[str]:
    """The tree as lines (box-drawing characters)."""
    lines: list[str] = []

    def label(item: dict[str, Any]) -> str:
        parts = []
        if item["condition"]:
            parts.append(f"[{item['condition']}]")
        parts.append(f"{item['target']} {item['id']} {item['status']}")
        if item["branch"]:
            parts.append(f"({item['branch']})")
        if item["signal_key"]:
            parts.append(f"signal {item['signal_key']!r}")
        if item["reason"] and not item["branch"]:
            parts.append(f"- {item['reason']}")
        if item["selected"]:
            parts.append("<- this job")
        return " ".join(parts)

    def walk(item: dict[str, Any], prefix: str, last: bool, top: bool) -> None:
        connector = "" if top else ("└─ " if last else "├─ ")
        lines.append(prefix + connector + label(item))
        children = item["children"]
        below = prefix if top else prefix + ("   " if last else "│  ")
        for index, child in enumerate(children):
            walk(child, below, index == len(children) - 1, False)

    walk(tree, "", True, True)
    return lines


__all__ = ["draw", "workflow_of"]
