"""Limits and early validation of hostile or careless input (``docs/security.md``).

Bad input is refused where it enters, with an error naming the parameter or the limit, instead
of failing deep inside (``OverflowError`` from ``timedelta``, ``UnicodeEncodeError`` from a
driver, a NUL byte PostgreSQL refuses but SQLite stores):

* :func:`check_delay_seconds` / :func:`check_schedule_time`: NaN, infinite and out-of-range
  delays and schedule times (``InvalidArgumentError`` naming the parameter);
* :func:`check_text`: NUL bytes and lone surrogates in idempotency keys, tags, execution
  targets and other stored labels;
* :class:`Limits`: the configured sizes (``limits.*`` keys): argument payloads at enqueue and
  results at completion (``LimitExceededError`` naming the key), job log lines per attempt.

Everything here is pure and cheap: the checks run on every enqueue.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs

from ratchet_api.errors import InvalidArgumentError, LimitExceededError
from ratchet_api.model import JobInvocation
from ratchet_api.spi import RatchetConfig, RatchetConfigKey
from ratchet_core.runtime.config import parse_int, register_key

MAX_DELAY = timedelta(days=36_600)
"""The longest delay (and the furthest schedule time from now) accepted: about 100 years."""

EARLIEST_SCHEDULE_TIME = datetime(1970, 1, 1, tzinfo=UTC)
"""Schedule times before this are refused (every store keeps times from here on)."""

MAX_PAYLOAD_BYTES: RatchetConfigKey[int] = register_key(
    RatchetConfigKey(
        "limits.max_payload_bytes",
        parse_int(minimum=0),
        1024 * 1024,
        "Largest stored invocation (target and JSON arguments, UTF-8 bytes) accepted at "
        "enqueue; larger is refused with LimitExceededError. 0 = no limit.",
    )
)
MAX_RESULT_BYTES: RatchetConfigKey[int] = register_key(
    RatchetConfigKey(
        "limits.max_result_bytes",
        parse_int(minimum=0),
        4 * 1024 * 1024,
        "Largest job result (JSON, UTF-8 bytes) a worker stores; a larger result fails the "
        "attempt with LimitExceededError (retried like any failure). 0 = no limit.",
    )
)
MAX_JOB_LOG_LINES: RatchetConfigKey[int] = register_key(
    RatchetConfigKey(
        "limits.max_job_log_lines",
        parse_int(minimum=0),
        10_000,
        "Most lines one attempt of a job stores in its job log (ctx.logger); further lines are "
        "dropped and one line says how many. 0 = no limit.",
    )
)


def _bad(field: str, message: str) -> InvalidArgumentError:
    """The error of a job option or parameter (``job option 'delay': ...``, the form of the
    builder's other option errors)."""
    return InvalidArgumentError(field, f"job option {field!r}: {message}")


def check_delay_seconds(field: str, value: Any) -> timedelta:
    """``value`` (seconds as an int/float, or a ``timedelta``) as a timedelta of 0 to
    :data:`MAX_DELAY`. NaN, infinities, negative and too large values are refused with
    ``InvalidArgumentError`` naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, timedelta)):
        raise _bad(field, f"expected seconds or a timedelta, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise _bad(field, f"must be a finite number of seconds, got {value!r}")
    if isinstance(value, timedelta):
        delay = value
    else:
        if abs(value) > MAX_DELAY.total_seconds():
            raise _bad(field, f"{value!r} seconds is more than the limit of {MAX_DELAY.days} days")
        delay = timedelta(seconds=float(value))
    if delay < timedelta(0):
        raise _bad(field, f"must not be negative, got {value!r}")
    if delay > MAX_DELAY:
        raise _bad(field, f"{delay} is more than the limit of {MAX_DELAY.days} days")
    return delay


def check_schedule_time(field: str, value: datetime) -> datetime:
    """An aware ``value`` in UTC, refused (``InvalidArgumentError`` naming ``field``) when it is
    before 1970 or more than :data:`MAX_DELAY` from now, or cannot be converted to UTC."""
    try:
        when = value.astimezone(UTC)
    except (OverflowError, ValueError) as exc:
        raise _bad(field, f"{value.isoformat()} cannot be expressed in UTC ({exc})") from None
    if when < EARLIEST_SCHEDULE_TIME:
        raise _bad(field, f"{when.isoformat()} is before {EARLIEST_SCHEDULE_TIME.isoformat()}")
    if when - datetime.now(UTC) > MAX_DELAY:
        raise _bad(field, f"{when.isoformat()} is more than {MAX_DELAY.days} days ahead")
    return when


def text_problem(value: str) -> str | None:
    """What makes ``value`` unstorable (a NUL byte, a lone surrogate), or None."""
    if value.isascii():
        return "it contains a NUL byte" if "\x00" in value else None
    if "\x00" in value:
        return "it contains a NUL byte"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"it contains a lone surrogate ({value[exc.start]!r} at index {exc.start}), "
            "which is not text any store can keep"
        )
    return None


def storable_text(value: str) -> str:
    """``value`` with its NUL bytes and lone surrogates replaced by U+FFFD: an error message or
    traceback, written as it is, was refused by PostgreSQL (and never stored)."""
    if text_problem(value) is None:
        return value
    return value.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")


def check_text(field: str, value: str) -> str:
    """``value`` unchanged, or ``InvalidArgumentError`` naming ``field`` when it holds a NUL byte
    or a lone surrogate (PostgreSQL refuses NUL, SQLite would store it and cut C-string
    readers; no UTF-8 store can keep a surrogate)."""
    problem = text_problem(value)
    if problem is not None:
        raise _bad(field, problem)
    return value


def _strings(value: Any, path: str) -> Sequence[tuple[str, str]]:
    """Every string in a JSON value with where it is (keys included)."""
    out: list[tuple[str, str]] = []
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            out.append((where, item))
        elif isinstance(item, Mapping):
            for key, inner in item.items():
                if isinstance(key, str):
                    out.append((f"{where} (a key)", key))
                stack.append((inner, f"{where}[{key!r}]"))
        elif isinstance(item, (list, tuple)):
            stack.extend((inner, f"{where}[{i}]") for i, inner in enumerate(item))
    return out


def check_invocation_text(invocation: JobInvocation) -> None:
    """Name the argument holding a lone surrogate or NUL-free-but-unencodable text: only called
    once the encoded payload was found unencodable, so its cost is paid on the error path."""
    values: list[tuple[str, Any]] = [(f"argument #{i}", v) for i, v in enumerate(invocation.args)]
    values.extend((f"argument {k!r}", v) for k, v in invocation.kwargs.items())
    for name, value in values:
        for where, text in _strings(value, ""):
            problem = text_problem(text)
            if problem is not None and "surrogate" in problem:
                field = f"{name}{where}"
                raise InvalidArgumentError(
                    field, f"{field} of job target {invocation.target}: {problem}"
                )
    raise InvalidArgumentError(
        "arguments", f"the arguments of job target {invocation.target} cannot be encoded as UTF-8"
    )


@attrs.frozen
class Limits:
    """The configured size limits (0 = none)."""

    max_payload_bytes: int = MAX_PAYLOAD_BYTES.default
    max_result_bytes: int = MAX_RESULT_BYTES.default
    max_job_log_lines: int = MAX_JOB_LOG_LINES.default

    @classmethod
    def from_settings(cls, settings: RatchetConfig) -> Limits:
        return cls(
            max_payload_bytes=settings.get(MAX_PAYLOAD_BYTES),
            max_result_bytes=settings.get(MAX_RESULT_BYTES),
            max_job_log_lines=settings.get(MAX_JOB_LOG_LINES),
        )

    def check_payload(self, payload: str, invocation: JobInvocation) -> None:
        """Refuse an encoded invocation that is too large (``LimitExceededError`` naming
        ``limits.max_payload_bytes``) or that holds a lone surrogate (``InvalidArgumentError``
        naming the argument). Characters are counted first: the UTF-8 size is computed only
        for a payload that could be over the limit, or that is not ASCII."""
        ascii_only = payload.isascii()
        if not ascii_only:
            try:
                size = len(payload.encode("utf-8"))
            except UnicodeEncodeError:
                check_invocation_text(invocation)
                raise  # pragma: no cover - check_invocation_text always raises
        else:
            size = len(payload)
        limit = self.max_payload_bytes
        if limit and size > limit:
            raise LimitExceededError(
                MAX_PAYLOAD_BYTES.name,
                size,
                limit,
                f"the arguments of job target {invocation.target} (stored invocation)",
            )

    def check_payloads(
        self, payloads: Sequence[str], invocations: Sequence[JobInvocation], first: int = 0
    ) -> None:
        """:meth:`check_payload` for each of a bulk enqueue's jobs (the error names the item,
        counted from ``first``: the position of this part's first job in the whole bulk)."""
        for index, (payload, invocation) in enumerate(
            zip(payloads, invocations, strict=True), first
        ):
            try:
                self.check_payload(payload, invocation)
            except (LimitExceededError, InvalidArgumentError) as exc:
                raise _with_item(exc, index, invocation) from exc

    def check_result(self, text: str | None, whose: str) -> None:
        """Refuse a serialized result over ``limits.max_result_bytes`` (``LimitExceededError``);
        ``whose`` names the job in the message."""
        limit = self.max_result_bytes
        if not limit or text is None or len(text) * 4 <= limit:
            return
        size = len(text.encode("utf-8", errors="surrogatepass"))
        if size > limit:
            raise LimitExceededError(MAX_RESULT_BYTES.name, size, limit, f"the result of {whose}")


def _with_item(exc: Exception, index: int, invocation: JobInvocation) -> Exception:
    if isinstance(exc, LimitExceededError):
        what = f"item {index}: the arguments of job target {invocation.target}"
        return LimitExceededError(exc.limit, exc.size, exc.maximum, what)
    assert isinstance(exc, InvalidArgumentError)
    return InvalidArgumentError(exc.field, f"item {index}: {exc}")


__all__ = [
    "EARLIEST_SCHEDULE_TIME",
    "MAX_DELAY",
    "MAX_JOB_LOG_LINES",
    "MAX_PAYLOAD_BYTES",
    "MAX_RESULT_BYTES",
    "Limits",
    "check_delay_seconds",
    "check_invocation_text",
    "check_schedule_time",
    "check_text",
    "storable_text",
    "text_problem",
]
