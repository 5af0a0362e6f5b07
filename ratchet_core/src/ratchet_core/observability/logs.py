"""Logging that never makes the worker's threads wait on rendering.

:func:`start_queued_logging` puts one :class:`logging.handlers.QueueHandler` on the root logger
and moves the real handlers (``ratchet worker`` uses rich, which takes seconds to render one
traceback on a busy machine) behind a :class:`~logging.handlers.QueueListener` thread: a log call
on a job, heartbeat or completion thread only enqueues the record. Tracebacks of transient store
errors (a dropped connection, a deadlock; :func:`is_transient`) are rendered as one line by
:class:`CompactTransientErrors` instead of hundreds of lines per occurrence.
:class:`EscapeControlCharacters` writes control characters of every message as escapes and
indents its continuation lines: stored data (a target name, an argument, an error) cannot send
escape sequences to the terminal or forge a log line (issue 26).
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import logging
import logging.handlers
import queue
import re
from collections.abc import Callable, Sequence

from ratchet_api.errors import StoreError


def is_transient(exc: BaseException | None) -> bool:
    """Whether ``exc`` is a store failure that retrying may cure (``StoreError.retryable``)."""
    return isinstance(exc, StoreError) and exc.retryable


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` of ``exc`` and of its direct cause, if any, with
    credentials redacted (a connection error quotes its URL)."""

    from ratchet_core.defaults.security import redact  # a driver's error may carry a DSN

    def first(e: BaseException) -> str:
        text = str(e).strip().splitlines()
        return f"{type(e).__name__}: {redact(text[0], 2000)}" if text else type(e).__name__

    cause = exc.__cause__ or exc.__context__
    if cause is None or str(cause).strip() in str(exc):
        return first(exc)
    return f"{first(exc)} (caused by {first(cause)})"


class CompactTransientErrors(logging.Filter):
    """Replaces the traceback of a record whose exception is a transient store error by one
    line appended to the message; other records pass unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        info = record.exc_info
        if info and is_transient(info[1]):
            assert info[1] is not None
            record.msg = f"{record.getMessage()} [{one_line(info[1])}]"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
_CONTINUATION = "\n    "


def _escape_char(match: re.Match[str]) -> str:
    char = match.group(0)
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def escape_controls(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with control characters written as escapes (ESC as ``\\x1b``, CR as ``\\x0d``),
    so that stored data printed or logged cannot move the cursor, recolour or clear a terminal.
    Newlines become ``\\n`` too, unless ``keep_newlines``: then every line after the first is
    indented, so a newline in stored data can never start what looks like a log line of its
    own. Tabs are kept."""
    text = _CONTROL.sub(_escape_char, text)
    if keep_newlines:
        return text.replace("\n", _CONTINUATION)
    return text.replace("\n", "\\n")


class EscapeControlCharacters(logging.Filter):
    """Escapes control characters in a record's message (:func:`escape_controls`, continuation
    lines indented) and in its rendered traceback: whatever a job put in a target name, an
    argument or an error reaches the log as text, on one log entry."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string is the handler's to report
            return True
        escaped = escape_controls(message, keep_newlines=True)
        if escaped != message or record.args:
            record.msg = escaped
            record.args = None
        return True


class _RecordQueueHandler(logging.handlers.QueueHandler):
    """Enqueues records unformatted: the message is merged with its arguments (they may
    change after the call) but the exception stays an object, so the listener's handler
    renders it (rich tracebacks included) on the listener thread, not on the caller's."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        prepared = copy.copy(record)
        prepared.msg = record.getMessage()
        prepared.args = None
        return prepared


def start_queued_logging(
    handlers: Sequence[logging.Handler], *, level: int | None = logging.WARNING
) -> logging.handlers.QueueListener:
    """Route the root logger through a queue to ``handlers`` on a listener thread.

    Replaces the root logger's handlers, sets its level to ``level`` (None: unchanged), adds
    :class:`CompactTransientErrors` to each handler and starts the listener (stopped at
    interpreter exit, after the queued records are handled). Returns the listener; call
    :func:`stop_queued_logging` to flush it and give the root logger its handlers back."""
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    compact = CompactTransientErrors()
    for handler in handlers:
        handler.addFilter(compact)
        handler.addFilter(_ESCAPE)
    listener = logging.handlers.QueueListener(records, *handlers, respect_handler_level=True)
    root = logging.getLogger()
    previous = (list(root.handlers), root.level)
    for old in previous[0]:
        root.removeHandler(old)
    queued = _RecordQueueHandler(records)
    root.addHandler(queued)
    if level is not None:
        root.setLevel(level)
    listener.start()
    _listeners.append(listener)
    _restore[id(listener)] = (queued, compact, previous)
    atexit.register(flush_queued_logging)
    return listener


def start_queued_logging_keeping_handlers(
    default: Callable[[], logging.Handler],
) -> logging.handlers.QueueListener:
    """:func:`start_queued_logging` for a command that may run inside an application (a
    ``manage.py`` or ``flask`` command, a test): the root logger's existing handlers (the
    application's logging configuration) move behind the queue unchanged and its level stays;
    only a process with no handler at all gets ``default()`` at WARNING."""
    existing = list(logging.getLogger().handlers)
    if existing:
        return start_queued_logging(existing, level=None)
    return start_queued_logging([default()], level=logging.WARNING)


def stop_queued_logging(listener: logging.handlers.QueueListener, timeout: float = 2.0) -> None:
    """Handle the records queued so far, stop ``listener`` and give the root logger back the
    handlers and level it had before :func:`start_queued_logging`. Never raises."""
    thread = listener._thread
    if thread is not None:
        with contextlib.suppress(Exception):
            listener.enqueue_sentinel()
            thread.join(timeout)
        listener._thread = None
    if listener in _listeners:
        _listeners.remove(listener)
    restore = _restore.pop(id(listener), None)
    if restore is None:
        return
    queued, compact, (handlers, level) = restore
    root = logging.getLogger()
    root.removeHandler(queued)
    for handler in handlers:
        handler.removeFilter(compact)
        handler.removeFilter(_ESCAPE)
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)


_ESCAPE = EscapeControlCharacters()
_listeners: list[logging.handlers.QueueListener] = []
_restore: dict[
    int,
    tuple[logging.Handler, logging.Filter, tuple[list[logging.Handler], int]],
] = {}


def flush_queued_logging(timeout: float = 2.0) -> None:
    """Handle the records queued so far (waiting at most ``timeout`` seconds per listener)
    and stop the listeners of :func:`start_queued_logging`; for a process about to end with
    ``os._exit``. Later records are dropped. Never raises."""
    while _listeners:
        listener = _listeners.pop()
        thread = listener._thread
        if thread is None:
            continue
        with contextlib.suppress(Exception):  # best effort on the way out
            listener.enqueue_sentinel()
            thread.join(timeout)
        listener._thread = None
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()


__all__ = [
    "CompactTransientErrors",
    "EscapeControlCharacters",
    "escape_controls",
    "flush_queued_logging",
    "is_transient",
    "one_line",
    "start_queued_logging",
    "start_queued_logging_keeping_handlers",
    "stop_queued_logging",
]
