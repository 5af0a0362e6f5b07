"""Logging that never makes the worker's threads wait on rendering.

:func:`start_queued_logging` puts one :class:`logging.handlers.QueueHandler` on the root logger
and moves the real handlers (``ratchet worker`` uses rich, which takes seconds to render one
traceback on a busy machine) behind a :class:`~logging.handlers.QueueListener` thread: a log call
on a job, heartbeat or completion thread only enqueues the record. Tracebacks of transient store
errors (a dropped connection, a deadlock; :func:`is_transient`) are rendered as one line by
:class:`CompactTransientErrors` instead of hundreds of lines per occurrence.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import logging
import logging.handlers
import queue
from collections.abc import Sequence

from ratchet_api.errors import StoreError


def is_transient(exc: BaseException | None) -> bool:
    """Whether ``exc`` is a store failure that retrying may cure (``StoreError.retryable``)."""
    return isinstance(exc, StoreError) and exc.retryable


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` of ``exc`` and of its direct cause, if any."""

    def first(e: BaseException) -> str:
        text = str(e).strip().splitlines()
        return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__

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
    handlers: Sequence[logging.Handler], *, level: int = logging.WARNING
) -> logging.handlers.QueueListener:
    """Route the root logger through a queue to ``handlers`` on a listener thread.

    Replaces the root logger's handlers, sets its level to ``level``, adds
    :class:`CompactTransientErrors` to each handler and starts the listener (stopped at
    interpreter exit, after the queued records are handled). Returns the listener; call
    ``stop()`` to flush and end it earlier."""
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    for handler in handlers:
        handler.addFilter(CompactTransientErrors())
    listener = logging.handlers.QueueListener(records, *handlers, respect_handler_level=True)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(_RecordQueueHandler(records))
    root.setLevel(level)
    listener.start()
    _listeners.append(listener)
    atexit.register(flush_queued_logging)
    return listener


_listeners: list[logging.handlers.QueueListener] = []


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
    "flush_queued_logging",
    "is_transient",
    "one_line",
    "start_queued_logging",
]
