"""Stored forms owned by the workflow engine.

* ``JobEntity.workflow``: ``{"v":1,"dependents":true,"signal_timeout_ms":...,"on_timeout":...}``:
  whether other jobs wait for this one (the worker then settles them when it finishes), and for a
  job that waits for a signal, its timeout and what happens then.
* ``WorkflowConditionEntity.expression`` of a branch side (kind ``CUSTOM``):
  ``{"v":1,"test":"EQUALS"|"ONE_OF"|"INVOCATION","value":...,"invocation":...,"when":true}``.
  ``when`` is the answer of the test that releases the child (False for the ``if_false`` side).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import attrs

from ratchet_api.errors import PayloadError
from ratchet_api.model import JobInvocation
from ratchet_api.workflow import ConditionTest, SignalTimeout
from ratchet_core.payload.forms import decode_invocation, dumps_compact, encode_invocation

FORMAT_VERSION = 1


@attrs.frozen(kw_only=True)
class WorkflowMeta:
    """What ``JobEntity.workflow`` holds."""

    dependents: bool = False
    signal_timeout: timedelta | None = None
    on_timeout: SignalTimeout = SignalTimeout.FAIL

    @property
    def empty(self) -> bool:
        return (
            not self.dependents
            and self.signal_timeout is None
            and (self.on_timeout is SignalTimeout.FAIL)
        )


_NONE = WorkflowMeta()


def encode_meta(meta: WorkflowMeta) -> str | None:
    if meta.empty:
        return None
    document: dict[str, Any] = {"v": FORMAT_VERSION}
    if meta.dependents:
        document["dependents"] = True
    if meta.signal_timeout is not None:
        document["signal_timeout_ms"] = int(meta.signal_timeout.total_seconds() * 1000)
    if meta.on_timeout is not SignalTimeout.FAIL:
        document["on_timeout"] = meta.on_timeout.value
    return dumps_compact(document)


def decode_meta(text: str | None) -> WorkflowMeta:
    """The stored meta; an unreadable one reads as none (logged by callers that care)."""
    if not text:
        return _NONE
    try:
        document = json.loads(text)
        timeout_ms = document.get("signal_timeout_ms")
        return WorkflowMeta(
            dependents=bool(document.get("dependents", False)),
            signal_timeout=None if timeout_ms is None else timedelta(milliseconds=timeout_ms),
            on_timeout=SignalTimeout(document.get("on_timeout", SignalTimeout.FAIL.value)),
        )
    except (ValueError, TypeError, AttributeError) as exc:
        raise PayloadError(f"stored workflow data {text[:100]!r} is invalid: {exc}") from exc


def has_dependents(text: str | None) -> bool:
    """Cheap test used on the worker's hot path (no JSON parsing for jobs outside workflows)."""
    return bool(text) and '"dependents":true' in str(text)


@attrs.frozen(kw_only=True)
class BranchTest:
    """A decoded branch condition."""

    test: ConditionTest
    when: bool = True
    value: Any = None
    invocation: JobInvocation | None = None


def encode_branch(test: BranchTest) -> str:
    document: dict[str, Any] = {"v": FORMAT_VERSION, "test": test.test.value, "when": test.when}
    if test.invocation is not None:
        document["invocation"] = encode_invocation(test.invocation)
    else:
        document["value"] = test.value
    return dumps_compact(document)


def decode_branch(text: str | None, parent_id: object) -> BranchTest:
    try:
        document = json.loads(text or "")
        kind = ConditionTest(document["test"])
        invocation = None
        if "invocation" in document:
            invocation = decode_invocation(document["invocation"], parent_id)  # type: ignore[arg-type]
        return BranchTest(
            test=kind,
            when=bool(document.get("when", True)),
            value=document.get("value"),
            invocation=invocation,
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise PayloadError(
            f"branch condition of the children of job {parent_id} is invalid: {exc}"
        ) from exc


__all__ = [
    "BranchTest",
    "WorkflowMeta",
    "decode_branch",
    "decode_meta",
    "encode_branch",
    "encode_meta",
    "has_dependents",
]
