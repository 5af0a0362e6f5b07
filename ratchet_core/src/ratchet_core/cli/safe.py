"""Stored data as printable text: what the CLI shows of arguments, results, errors, targets,
tags and log lines comes from the database, so it is printed verbatim, never interpreted.

:func:`shown` makes a ``rich.text.Text`` (rich never parses a ``Text`` for markup, so
``[/oops]`` or ``[bold]`` in stored data is shown as written instead of raising
``MarkupError`` or restyling the output) with control characters written as escapes (``\\x1b``
instead of an ESC that would move the cursor, recolour or clear the terminal). Every table cell
and line that holds stored data goes through it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ratchet_core.observability.logs import escape_controls

if TYPE_CHECKING:
    from rich.text import Text


def printable(value: object, *, multiline: bool = False) -> str:
    """``str(value)`` with control characters escaped; newlines kept when ``multiline`` (a
    traceback), else escaped too (a table cell, one log line)."""
    text = str(value)
    if not multiline:
        return escape_controls(text)
    return "\n".join(escape_controls(line) for line in text.split("\n"))


def shown(value: object, *, style: str = "", multiline: bool = False) -> Text:
    """``value`` as a rich ``Text`` printed verbatim (see the module docstring)."""
    from rich.text import Text

    return Text(printable(value, multiline=multiline), style=style)


__all__ = ["printable", "shown"]
