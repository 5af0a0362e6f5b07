"""Job targets of the composition matrix (tests/engine/test_composition_matrix.py).

Each takes the test's secret marker and checks what it receives: a step that gets a sealed
value instead of its plaintext (a parent result, a signal payload, a predicate argument) fails,
so a wrong terminal status shows the defect."""

from __future__ import annotations

from ratchet_api.model import JobResult
from ratchet_api.workflow import ParentError, ParentResult, SignalPayload


def make(marker: str) -> dict[str, str]:
    """Returns the marker in its result (a sealed result must not show it)."""
    return {"token": f"{marker}-result"}


def fail(marker: str) -> None:
    raise RuntimeError(f"upstream refused {marker}-error")


def step(value: ParentResult[dict[str, str]], marker: str) -> str:
    """A ``then`` step: its parent's result must arrive opened."""
    if value != {"token": f"{marker}-result"}:
        raise AssertionError(f"the parent result arrived as {value!r}")
    return "step-done"


def handled(error: ParentError, marker: str) -> str:
    """An ``on_failure`` callback: the parent's error must arrive opened."""
    if f"{marker}-error" not in (error or ""):
        raise AssertionError(f"the parent error arrived as {error!r}")
    return "failure-handled"


def token_is(expected: str, result: JobResult) -> bool:
    """A branch predicate with a secret argument."""
    return bool(result.value == {"token": expected})


def side(label: str) -> str:
    return label


def signalled(payload: SignalPayload[dict[str, str]], marker: str) -> str:
    """An ``await_signal`` job: the signal payload must arrive opened."""
    if payload != {"pin": f"{marker}-signal"}:
        raise AssertionError(f"the signal payload arrived as {payload!r}")
    return "signalled"
