"""For store authors who map rows or documents to the entities with cattrs: which field of a
stored record failed to convert, so that a ``StoreDataError`` can name it."""

from __future__ import annotations

import cattrs


def first_invalid_field(exc: BaseException, unknown: str = "?") -> tuple[str, BaseException]:
    """(field name, innermost error) of the first failure inside a cattrs structuring error
    (``ClassValidationError`` / ``IterableValidationError``, as raised with detailed validation)
    or an attrs validator's error (whose message starts with the attribute name). ``unknown``
    when no field can be told."""
    if isinstance(exc, cattrs.ClassValidationError):
        for sub in exc.exceptions:
            for note in getattr(sub, "__notes__", []):
                name = getattr(note, "name", None)
                if isinstance(name, str):
                    return name, first_invalid_field(sub, unknown)[1]
            return first_invalid_field(sub, unknown)
    if isinstance(exc, cattrs.IterableValidationError):
        if exc.exceptions:
            return first_invalid_field(exc.exceptions[0], unknown)
        return unknown, exc
    first = str(exc).split(" ", 1)[0].rstrip(":'\"")
    return (first if first.isidentifier() else unknown), exc


__all__ = ["first_invalid_field"]
