"""The outcome decision as a table (issue 23): every way a claimed job can end, decided by one
pure function (no store, no threads)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from ratchet_api.errors import InvalidTargetError, TargetNotImportableError
from ratchet_api.model import BackoffKind, BackoffPolicy
from ratchet_core.defaults.retry import DefaultRetryPolicy
from ratchet_core.worker.outcome import (
    DEFAULT_CIRCUIT_DELAY,
    SANITIZER_FAILED,
    CircuitOpen,
    DeferReason,
    Happened,
    Outcome,
    OutcomeKind,
    Raised,
    Refused,
    Returned,
    Shutdown,
    Superseded,
    Throttled,
    decide,
    withheld_message,
)

FIXED = BackoffPolicy(kind=BackoffKind.FIXED, initial=timedelta(seconds=7), jitter=False)
BOOM = RuntimeError("boom")
REFUSAL = InvalidTargetError("os.system is not an allowed target")


def sanitize(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def broken_sanitizer(exc: BaseException) -> str:
    raise ValueError("sanitizer bug")


def _decide(happened: Happened, *, attempt: int = 1, max_retries: int = 2, **kw: Any) -> Outcome:
    return decide(
        happened,
        attempt=attempt,
        max_retries=max_retries,
        backoff=FIXED,
        retry_policy=DefaultRetryPolicy(),
        sanitize=kw.pop("sanitize", sanitize),
        trace=kw.pop("trace", None),
    )


class _NeverRetry:
    def should_retry(self, attempt: int, cause: BaseException) -> bool:
        return False

    def get_delay(self, attempt: int) -> timedelta:
        return timedelta(0)


TABLE: list[tuple[str, Happened, dict[str, Any], Outcome]] = [
    ("success", Returned('"ok"'), {}, Outcome(kind=OutcomeKind.SUCCEEDED, result='"ok"')),
    (
        "failure with retries left",
        Raised(BOOM),
        {"attempt": 1, "max_retries": 2},
        Outcome(
            kind=OutcomeKind.RETRY,
            delay=timedelta(seconds=7),
            message="RuntimeError: boom",
            cause=BOOM,
        ),
    ),
    (
        "failure of the last attempt",
        Raised(BOOM),
        {"attempt": 3, "max_retries": 2},
        Outcome(kind=OutcomeKind.DEAD_LETTER, message="RuntimeError: boom", cause=BOOM),
    ),
    (
        "refusal raised before the call is never retried",
        Raised(REFUSAL, called=False),
        {"attempt": 1, "max_retries": 5},
        Outcome(
            kind=OutcomeKind.DEAD_LETTER,
            message="InvalidTargetError: os.system is not an allowed target",
            cause=REFUSAL,
        ),
    ),
    (
        "refusal at dispatch",
        Refused("refused at dispatch: not allowed"),
        {},
        Outcome(kind=OutcomeKind.DEAD_LETTER, message="refused at dispatch: not allowed"),
    ),
    (
        "open circuit",
        CircuitOpen("payments", timedelta(seconds=12)),
        {},
        Outcome(
            kind=OutcomeKind.DEFER,
            delay=timedelta(seconds=12),
            defer_reason=DeferReason.CIRCUIT,
            service="payments",
        ),
    ),
    (
        "open circuit, no delay given",
        CircuitOpen("payments", None),
        {},
        Outcome(
            kind=OutcomeKind.DEFER,
            delay=DEFAULT_CIRCUIT_DELAY,
            defer_reason=DeferReason.CIRCUIT,
            service="payments",
        ),
    ),
    (
        "open circuit, negative delay",
        CircuitOpen("payments", timedelta(seconds=-1)),
        {},
        Outcome(
            kind=OutcomeKind.DEFER,
            delay=DEFAULT_CIRCUIT_DELAY,
            defer_reason=DeferReason.CIRCUIT,
            service="payments",
        ),
    ),
    (
        "flow control",
        Throttled(timedelta(seconds=3)),
        {},
        Outcome(
            kind=OutcomeKind.DEFER,
            delay=timedelta(seconds=3),
            defer_reason=DeferReason.FLOW_CONTROL,
        ),
    ),
    ("shutdown before start", Shutdown(started=False), {}, Outcome(kind=OutcomeKind.RELEASE)),
    (
        "shutdown while running",
        Shutdown(started=True, reason="WorkerShutdown: node n stopped"),
        {},
        Outcome(
            kind=OutcomeKind.INTERRUPTED_REQUEUE,
            delay=timedelta(0),
            message="WorkerShutdown: node n stopped",
        ),
    ),
    ("claim superseded", Superseded(), {}, Outcome(kind=OutcomeKind.SUPERSEDED)),
]


@pytest.mark.parametrize(
    ("happened", "job", "expected"),
    [row[1:] for row in TABLE],
    ids=[row[0] for row in TABLE],
)
def test_every_way_a_job_ends_has_one_outcome(
    happened: Happened, job: dict[str, Any], expected: Outcome
) -> None:
    assert _decide(happened, **job) == expected


def test_the_table_covers_every_outcome_kind() -> None:
    assert {row[3].kind for row in TABLE} == set(OutcomeKind)


def test_a_sanitizer_that_raises_gives_a_fixed_safe_message_and_still_retries() -> None:
    outcome = _decide(Raised(RuntimeError("password=hunter2")), sanitize=broken_sanitizer)
    assert outcome.kind is OutcomeKind.RETRY
    assert outcome.message == withheld_message(RuntimeError())
    assert outcome.message == f"RuntimeError {SANITIZER_FAILED}"
    assert outcome.trace is None  # the raw traceback would carry the unsanitized message


def test_a_target_missing_here_is_a_failed_attempt_retried_by_the_policy() -> None:
    missing = TargetNotImportableError("tests.gone:f")
    assert _decide(Raised(missing, called=False)).kind is OutcomeKind.RETRY


def test_an_overriding_retry_policy_decides_alone() -> None:
    outcome = decide(
        Raised(BOOM),
        attempt=1,
        max_retries=10,
        backoff=None,
        retry_policy=_NeverRetry(),
        sanitize=sanitize,
    )
    assert outcome.kind is OutcomeKind.DEAD_LETTER


def test_the_traceback_is_kept_unless_tracing_it_fails() -> None:
    kept = _decide(Raised(BOOM), trace=lambda exc: "Traceback ...\nRuntimeError: boom")
    assert kept.trace == "Traceback ...\nRuntimeError: boom"

    def broken(exc: BaseException) -> str:
        raise OSError("no frames")

    assert _decide(Raised(BOOM), trace=broken).trace is None
