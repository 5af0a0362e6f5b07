"""How a claimed job ends: one frozen :class:`Outcome`, decided in one place.

Every way a job the worker claimed can end is described by one of the "what happened" values
below and turned into an :class:`Outcome` by :func:`decide`; the completer
(``completion.py``) is the only part that writes outcomes to the store. Nothing here touches
threads or the store, so the whole decision is tested as a table (``tests/engine/
test_outcome_decide.py``).

========================  ===================================  =========================
what happened             outcome                              store write (fenced)
========================  ===================================  =========================
:class:`Returned`         ``SUCCEEDED``                        ``mark_succeeded_many``
:class:`Raised`           ``RETRY`` or ``DEAD_LETTER``         ``schedule_retry`` /
                          (the ``RetryPolicy``; a dispatch       ``mark_failed_terminal``
                          refusal is never retried)
:class:`Refused`          ``DEAD_LETTER``                      ``mark_failed_terminal``
:class:`CircuitOpen`      ``DEFER`` (attempt not counted)      ``release_claim(run_at)``
:class:`Throttled`        ``DEFER`` (attempt not counted)      ``defer_claim``
:class:`Shutdown`         ``RELEASE`` (never started) or       ``release_claim`` /
                          ``INTERRUPTED_REQUEUE``              ``schedule_retry(now)``
:class:`Superseded`       ``SUPERSEDED``                       none (the claim is gone)
========================  ===================================  =========================
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from datetime import timedelta

import attrs

from ratchet_api.errors import (
    ClassNotAllowedError,
    EncryptionError,
    InvalidTargetError,
    JobAuthorizationError,
    PayloadError,
    TargetNotImportableError,
)
from ratchet_api.model import BackoffPolicy
from ratchet_api.spi import RetryPolicy
from ratchet_core.worker.retry import decide_retry

_log = logging.getLogger("ratchet.worker")

REFUSED = (
    InvalidTargetError,
    ClassNotAllowedError,
    PayloadError,
    EncryptionError,
    JobAuthorizationError,
)
"""Dispatch-time refusals: the job can never run as stored, so it is not retried."""

DEFAULT_CIRCUIT_DELAY = timedelta(seconds=30)
"""Deferral of a job whose circuit is open when the ``ResilienceStrategy`` gives no usable
delay (None, negative, not a ``timedelta``, or its ``get_retry_delay`` raised)."""

SANITIZER_FAILED = "(message withheld: the error sanitizer failed)"
"""The end of the stored text of an error whose ``ErrorSanitizer`` raised or returned no text
(:func:`withheld_message`)."""


def withheld_message(error: BaseException) -> str:
    """The stored text of ``error`` when the ``ErrorSanitizer`` failed on it: its class and
    :data:`SANITIZER_FAILED`, never its message (the raw message may hold what the sanitizer
    was meant to remove). The one text for every place that sanitizes (a failed attempt, a
    refusal at dispatch, each exception of a chained traceback)."""
    return f"{type(error).__qualname__} {SANITIZER_FAILED}"


class OutcomeKind(enum.Enum):
    """The ways a claimed job ends on this worker."""

    SUCCEEDED = "succeeded"
    RETRY = "retry"
    """A failed attempt, due again after the retry delay (the attempt counts)."""
    DEAD_LETTER = "dead_letter"
    RELEASE = "release"
    """Given back unstarted (shutdown, a job that could not be accepted): not counted."""
    DEFER = "defer"
    """Not admitted now (flow control, an open circuit): due again later, not counted."""
    INTERRUPTED_REQUEUE = "interrupted_requeue"
    """Still running when the worker stopped: put back to pending at once."""
    SUPERSEDED = "superseded"
    """The claim was taken back before the job started: nothing to write."""


class DeferReason(enum.Enum):
    FLOW_CONTROL = "flow_control"
    CIRCUIT = "circuit"


# ---------------------------------------------------------------- what happened


@attrs.frozen
class Returned:
    """The call returned; ``stored`` is the serialized (and sealed) result."""

    stored: str | None


@attrs.frozen
class Raised:
    """The job failed with ``error``: raised by the call (``called``) or before it (its target
    cannot be imported here, its result could not be stored, a dispatch refusal)."""

    error: BaseException
    called: bool = True


@attrs.frozen
class Refused:
    """Refused at dispatch for ``reason`` (it can never run as stored)."""

    reason: str


@attrs.frozen
class CircuitOpen:
    """The circuit of ``service`` rejects calls; ``delay`` is what the ``ResilienceStrategy``'s
    ``get_retry_delay`` answered (anything: validated by :func:`decide`), None if it raised."""

    service: str
    delay: object


@attrs.frozen
class Throttled:
    """Not admitted by flow control (a resource permit, a rate limit) for ``delay``."""

    delay: timedelta


@attrs.frozen
class Shutdown:
    """The worker stops: the job had ``started`` (it is interrupted) or not (given back)."""

    started: bool
    reason: str = "WorkerShutdown: the worker stopped before the job finished"


@attrs.frozen
class Superseded:
    """The store reported the claim superseded (recovered, cancelled) before the job started."""


Happened = Returned | Raised | Refused | CircuitOpen | Throttled | Shutdown | Superseded


@attrs.frozen(kw_only=True)
class Outcome:
    """How one claim of a job ends. ``delay``: due again after it (``RETRY``, ``DEFER``);
    ``message``: the sanitized error (``RETRY``, ``DEAD_LETTER``, ``INTERRUPTED_REQUEUE``);
    ``result``: the stored result (``SUCCEEDED``); ``cause``: the exception, if any;
    ``trace``: its sanitized traceback."""

    kind: OutcomeKind
    delay: timedelta | None = None
    message: str | None = None
    result: str | None = None
    cause: BaseException | None = None
    trace: str | None = None
    defer_reason: DeferReason | None = None
    service: str | None = None


Sanitize = Callable[[BaseException], str]
Trace = Callable[[BaseException], str]


def decide(
    happened: Happened,
    *,
    attempt: int,
    max_retries: int,
    backoff: BackoffPolicy | None,
    retry_policy: RetryPolicy,
    sanitize: Sanitize,
    trace: Trace | None = None,
) -> Outcome:
    """The outcome of ``happened`` to attempt ``attempt`` of a job allowed ``max_retries``
    retries. Never raises: a ``RetryPolicy`` that raises dead-letters (``decide_retry``), an
    ``ErrorSanitizer`` that raises gives :data:`SANITIZER_FAILED` as the message, an unusable
    circuit delay gives :data:`DEFAULT_CIRCUIT_DELAY` (logged)."""
    match happened:
        case Returned(stored):
            return Outcome(kind=OutcomeKind.SUCCEEDED, result=stored)
        case Refused(reason):
            return Outcome(kind=OutcomeKind.DEAD_LETTER, message=reason)
        case Throttled(delay):
            return Outcome(
                kind=OutcomeKind.DEFER,
                delay=max(delay, timedelta(0)),
                defer_reason=DeferReason.FLOW_CONTROL,
            )
        case CircuitOpen(service, delay):
            return Outcome(
                kind=OutcomeKind.DEFER,
                delay=_circuit_delay(service, delay),
                defer_reason=DeferReason.CIRCUIT,
                service=service,
            )
        case Shutdown(started, reason):
            if not started:
                return Outcome(kind=OutcomeKind.RELEASE)
            return Outcome(kind=OutcomeKind.INTERRUPTED_REQUEUE, delay=timedelta(0), message=reason)
        case Superseded():
            return Outcome(kind=OutcomeKind.SUPERSEDED)
        case Raised(error, called):
            message, text = _sanitized(error, sanitize, trace)
            if (
                isinstance(error, REFUSED)
                and not isinstance(error, TargetNotImportableError)
                and not called
            ):
                # the stored arguments can never be restored: retrying cannot help (a target
                # missing here is retried: newer code may be deployed by then)
                return Outcome(
                    kind=OutcomeKind.DEAD_LETTER, message=message, cause=error, trace=text
                )
            decision = decide_retry(
                retry_policy,
                attempt=attempt,
                max_retries=max_retries,
                backoff=backoff,
                cause=error,
            )
            kind = OutcomeKind.DEAD_LETTER if decision.delay is None else OutcomeKind.RETRY
            return Outcome(
                kind=kind, delay=decision.delay, message=message, cause=error, trace=text
            )
    raise TypeError(f"not a Happened value: {happened!r}")  # pragma: no cover


def _sanitized(
    error: BaseException, sanitize: Sanitize, trace: Trace | None
) -> tuple[str, str | None]:
    message: object
    try:
        message = sanitize(error)
    except Exception:  # noqa: BLE001 - a broken sanitizer must not leave the job RUNNING
        _log.exception(
            "the ErrorSanitizer raised while sanitizing a %s; the job's error is stored as %r",
            type(error).__name__,
            withheld_message(error),
        )
        message = None
    if not isinstance(message, str):  # raised, or broke its contract
        return withheld_message(error), None
    if trace is None:
        return message, None
    try:
        return message, trace(error)
    except Exception:  # noqa: BLE001 - the traceback is optional
        return message, None


def _circuit_delay(service: str, delay: object) -> timedelta:
    if isinstance(delay, timedelta) and delay >= timedelta(0):
        return delay
    _log.error(
        "ResilienceStrategy.get_retry_delay(%r) gave %r, not a timedelta >= 0; the job is "
        "deferred by the default %gs",
        service,
        delay,
        DEFAULT_CIRCUIT_DELAY.total_seconds(),
    )
    return DEFAULT_CIRCUIT_DELAY


__all__ = [
    "DEFAULT_CIRCUIT_DELAY",
    "REFUSED",
    "SANITIZER_FAILED",
    "withheld_message",
    "CircuitOpen",
    "DeferReason",
    "Happened",
    "Outcome",
    "OutcomeKind",
    "Raised",
    "Refused",
    "Returned",
    "Shutdown",
    "Superseded",
    "Throttled",
    "decide",
]
