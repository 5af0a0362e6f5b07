"""The sanitized traceback of a failed attempt: logged by the worker and kept with the
attempt's execution record (``ExecutionRecord.traceback``, shown by ``ratchet jobs show``).

Every exception of the chain (``__cause__``, and ``__context__`` unless suppressed) is written as
Python writes it, except that each exception's own line ("Type: message") is the
``ErrorSanitizer``'s text for that exception, the same as the job's ``last_error`` for the last
one: a custom sanitizer decides what is stored or logged about every error of the chain, not
only the last. The frame lines (file, line, source) go through the default redaction
(credentials in URLs, ``password=...``, tokens, keys, card numbers, e-mail addresses).

The text is bounded: at most :data:`MAX_CHAIN` exceptions and :data:`MAX_FRAMES` innermost frames
of each are formatted, and the head of a long traceback is cut (its innermost frames are kept),
so a huge message or a deep recursion costs no more than a bounded one.
"""

from __future__ import annotations

import functools
import traceback
from types import TracebackType

from ratchet_api.spi import ErrorSanitizer
from ratchet_core.defaults.security import redact
from ratchet_core.worker.outcome import withheld_message

MAX_TRACEBACK_LENGTH = 8000
MAX_CHAIN = 16
MAX_FRAMES = 40
_CUT = "... [earlier frames cut]\n"
_FRAME_CACHE = 1024  # redacted frame texts remembered (at most ~1 MB with the bound below)
_FRAME_CACHED_LENGTH = 1000
_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"


def safe_sanitize(sanitizer: ErrorSanitizer, exc: BaseException) -> str:
    """``sanitizer.sanitize(exc)``; when the sanitizer itself fails, a fixed text naming the
    exception's class and saying so (never the message, which the sanitizer did not vet)."""
    text: object
    try:
        text = sanitizer.sanitize(exc)
    except Exception:  # noqa: BLE001 - a broken sanitizer must not leak or break failure handling
        text = None
    if not isinstance(text, str):  # raised, or broke its contract
        return withheld_message(exc)
    return text


def _chain(exc: BaseException) -> list[tuple[BaseException, str]]:
    """The exceptions from the outermost (``exc``) inwards, each with the sentence that Python
    prints between it and the (inner) exception shown before it."""
    chain: list[tuple[BaseException, str]] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(chain) < MAX_CHAIN:
        seen.add(id(current))
        if current.__cause__ is not None:
            chain.append((current, _CAUSE))
            current = current.__cause__
        elif current.__context__ is not None and not current.__suppress_context__:
            chain.append((current, _CONTEXT))
            current = current.__context__
        else:
            chain.append((current, ""))
            current = None
    return chain


@functools.lru_cache(maxsize=_FRAME_CACHE)
def _redacted_frame(text: str) -> str:
    return redact(text, MAX_TRACEBACK_LENGTH)


def _frames(tb: TracebackType | None) -> str:
    if tb is None:
        return ""
    frames = traceback.format_tb(tb, limit=-MAX_FRAMES)
    joined = "".join(frames)
    if len(joined) > MAX_TRACEBACK_LENGTH:  # cut as one text, as redact cuts it
        redacted = redact(joined, MAX_TRACEBACK_LENGTH)
    else:
        # Frame by frame: a frame's text is its file, line, function and source line (no
        # runtime value), the same for every failure raised at that place, so its redaction
        # is remembered (the 11 patterns cost ~0.4 ms a traceback, the lookup ~1 us a frame).
        redacted = "".join(
            _redacted_frame(frame)
            if len(frame) <= _FRAME_CACHED_LENGTH
            else redact(frame, MAX_TRACEBACK_LENGTH)
            for frame in frames
        )
    return "Traceback (most recent call last):\n" + redacted


def sanitized_traceback(
    exc: BaseException,
    sanitizer: ErrorSanitizer,
    limit: int = MAX_TRACEBACK_LENGTH,
    *,
    message: str | None = None,
) -> str:
    """``exc``'s traceback (its chained causes included) with every exception line given by
    ``sanitizer`` and the frames redacted, ending with ``sanitizer.sanitize(exc)`` (or
    ``message``, that text when the caller has it already). Never raises (falls back to the
    sanitized message alone)."""
    if message is None:
        message = safe_sanitize(sanitizer, exc)
    try:
        parts: list[str] = []
        for error, separator in reversed(_chain(exc)):
            text = message if error is exc else safe_sanitize(sanitizer, error)
            # an exception's link to the one before it is printed between the two
            parts.append((separator if parts else "") + _frames(error.__traceback__) + text + "\n")
        text = "".join(parts).rstrip("\n")
    except Exception:  # noqa: BLE001 - a broken frame must not break failure handling
        return message
    if len(text) > limit:
        text = _CUT + text[-(limit - len(_CUT)) :]
    return text


__all__ = ["MAX_TRACEBACK_LENGTH", "safe_sanitize", "sanitized_traceback"]
