"""The sanitized traceback of a failed attempt: logged by the worker and kept with the
attempt's execution record (``ExecutionRecord.traceback``, shown by ``ratchet jobs show``).

Every line of the formatted traceback (chained exceptions included) goes through the default
redaction (credentials in URLs, ``password=...``, tokens, e-mail addresses); the final line is
the ``ErrorSanitizer``'s text, the same as the job's ``last_error``. The text is bounded: the
head of a long traceback is cut, its innermost frames are kept.
"""

from __future__ import annotations

import traceback

from ratchet_api.spi import ErrorSanitizer
from ratchet_core.defaults.security import redact

MAX_TRACEBACK_LENGTH = 8000
_CUT = "... [earlier frames cut]\n"


def sanitized_traceback(
    exc: BaseException, sanitizer: ErrorSanitizer, limit: int = MAX_TRACEBACK_LENGTH
) -> str:
    """``exc``'s traceback with secrets redacted, ending with ``sanitizer.sanitize(exc)``.
    Never raises (falls back to the sanitized message alone)."""
    message = sanitizer.sanitize(exc)
    try:
        lines = traceback.format_exception(exc)
        # the last element is "Type: message" of exc itself: the sanitizer's text instead
        text = redact("".join(lines[:-1])) + message
    except Exception:  # noqa: BLE001 - a broken __str__ or frame must not break failure handling
        return message
    if len(text) > limit:
        text = _CUT + text[-(limit - len(_CUT)) :]
    return text


__all__ = ["MAX_TRACEBACK_LENGTH", "sanitized_traceback"]
