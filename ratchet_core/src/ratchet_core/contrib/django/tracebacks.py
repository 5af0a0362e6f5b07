"""A traceback with the shape Python prints, whose exception lines come from the
``ErrorSanitizer``: frames (file, line, function, source line) as ``traceback`` formats them,
each ``Type: message`` line replaced by ``sanitizer.sanitize(exc)``, causes and contexts
chained with Python's own separator lines. No local variable or argument value appears.
"""

from __future__ import annotations

import traceback

from ratchet_api.spi.policies import ErrorSanitizer

_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"
_MAX_CHAIN = 20


def sanitized_traceback(error: BaseException, sanitizer: ErrorSanitizer) -> str:
    """``error``'s traceback (with its ``__cause__``/``__context__`` chain, innermost first, as
    Python prints it), every exception line sanitized. Never raises: a failure to format gives
    the sanitized exception line alone."""
    try:
        chain: list[tuple[BaseException, str]] = []  # (exception, separator printed after it)
        seen: set[int] = set()
        current: BaseException | None = error
        separator = ""
        while current is not None and id(current) not in seen and len(chain) < _MAX_CHAIN:
            seen.add(id(current))
            chain.append((current, separator))
            if current.__cause__ is not None:
                current, separator = current.__cause__, _CAUSE
            elif current.__context__ is not None and not current.__suppress_context__:
                current, separator = current.__context__, _CONTEXT
            else:
                current = None
        parts: list[str] = []
        for exc, after in reversed(chain):
            parts.append(_one(exc, sanitizer))
            if after:
                parts.append(after)
        return "".join(parts)
    except Exception:  # noqa: BLE001 - never raise from error reporting
        return sanitizer.sanitize(error) + "\n"


def _one(exc: BaseException, sanitizer: ErrorSanitizer) -> str:
    line = sanitizer.sanitize(exc).rstrip("\n") + "\n"
    if exc.__traceback__ is None:
        return line
    frames = "".join(traceback.format_tb(exc.__traceback__))
    return f"Traceback (most recent call last):\n{frames}{line}"


__all__ = ["sanitized_traceback"]
