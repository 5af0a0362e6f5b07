"""The loguru-backed ``JobLoggerFactory``.

Every line goes to loguru with ``job_id``, ``attempt``, ``target``, ``node_id`` and ``job_type``
bound as extra context (``{extra[job_id]}`` in a loguru format). When the store advertises the
``JobAuditStore`` capability the lines are also kept in the job's stored log: they are buffered
and written with one ``append_logs`` call when the logger is flushed or closed (the worker closes
it after the attempt) or when ``buffer_size`` lines are waiting, so a job does not pay a database
round trip per line.

Lines are redacted like errors (credentials, tokens, keys, card numbers: ``redact``) before they
are stored or printed; an attempt stores at most ``limits.max_job_log_lines`` lines (one more
says the limit was reached).
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

import attrs
from loguru import logger as _loguru

from ratchet_api.model import JobLoggerContext
from ratchet_api.spi import RatchetConfig
from ratchet_api.store.entities import JobLogLine, LogLevel
from ratchet_api.store.protocols import JobAuditStore
from ratchet_core.defaults.security import redact
from ratchet_core.observability.logs import escape_controls
from ratchet_core.payload.limits import MAX_JOB_LOG_LINES

_LOGURU_LEVELS = {
    LogLevel.TRACE: "TRACE",
    LogLevel.DEBUG: "DEBUG",
    LogLevel.INFO: "INFO",
    LogLevel.WARNING: "WARNING",
    LogLevel.ERROR: "ERROR",
}


class LoguruJobLogger:
    """A job-scoped logger. Thread safe. ``flush()`` writes buffered lines to the store;
    ``close()`` flushes and makes further lines go to loguru only. Usable as a context
    manager."""

    def __init__(
        self,
        context: JobLoggerContext,
        audit: JobAuditStore | None,
        *,
        buffer_size: int = 200,
        max_line_length: int = 4000,
        max_lines: int = MAX_JOB_LOG_LINES.default,
    ) -> None:
        self.context = context
        self._max_lines = max_lines
        self._stored = 0  # lines accepted for the store (the limit counts these)
        self._audit = audit
        self._buffer: list[JobLogLine] = []
        self._buffer_size = max(1, buffer_size)
        self._max_line_length = max_line_length
        self._lock = threading.Lock()
        self._closed = False
        self._log = _loguru.bind(
            job_id=str(context.job_id),
            attempt=context.attempt,
            target=context.target,
            node_id=context.node_id,
            job_type=context.job_type.value,
        )

    @property
    def pending(self) -> int:
        """Lines waiting to be written to the store."""
        with self._lock:
            return len(self._buffer)

    def _emit(self, level: LogLevel, message: str) -> None:
        # A job's lines are stored and printed: secrets are redacted first (bounded, linear:
        # see ratchet_core.defaults.security.redact), and the printed line has its control
        # characters escaped so that it stays one line of text.
        message = redact(str(message), self._max_line_length)[: self._max_line_length]
        self._log.opt(depth=2).log(_LOGURU_LEVELS[level], escape_controls(message))
        if self._audit is None:
            return
        line = JobLogLine(
            job_id=self.context.job_id,
            level=level,
            message=message,
            attempt=self.context.attempt,
        )
        flush_now = False
        with self._lock:
            if self._closed:
                return
            if self._max_lines and self._stored >= self._max_lines:
                if self._stored == self._max_lines:
                    self._stored += 1
                    self._buffer.append(
                        attrs.evolve(
                            line,
                            level=LogLevel.WARNING,
                            message=(
                                f"job log limit reached ({MAX_JOB_LOG_LINES.name} = "
                                f"{self._max_lines}): further lines of this attempt are not stored"
                            ),
                        )
                    )
                return
            self._stored += 1
            self._buffer.append(line)
            flush_now = len(self._buffer) >= self._buffer_size
        if flush_now:
            self.flush()

    def trace(self, message: str) -> None:
        self._emit(LogLevel.TRACE, message)

    def debug(self, message: str) -> None:
        self._emit(LogLevel.DEBUG, message)

    def info(self, message: str) -> None:
        self._emit(LogLevel.INFO, message)

    def warn(self, message: str) -> None:
        self._emit(LogLevel.WARNING, message)

    warning = warn

    def error(self, message: str) -> None:
        self._emit(LogLevel.ERROR, message)

    def flush(self) -> None:
        """Write the buffered lines with one ``append_logs`` call. A store failure is logged to
        loguru and the lines are dropped (the job's outcome never depends on its log)."""
        if self._audit is None:
            return
        with self._lock:
            lines, self._buffer = self._buffer, []
        if not lines:
            return
        try:
            self._audit.append_logs(lines)
        except Exception as exc:  # noqa: BLE001 - logging must not fail the job
            self._log.warning("could not store {} job log lines: {!r}", len(lines), exc)

    def close(self) -> None:
        """Flush and stop storing lines. Idempotent."""
        self.flush()
        with self._lock:
            self._closed = True

    def __enter__(self) -> LoguruJobLogger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class LoguruJobLoggerFactory:
    """Creates :class:`LoguruJobLogger`; stores lines when ``store`` has ``JobAuditStore``."""

    def __init__(
        self, store: Any = None, *, buffer_size: int = 200, settings: RatchetConfig | None = None
    ) -> None:
        self._max_lines = (
            MAX_JOB_LOG_LINES.default if settings is None else settings.get(MAX_JOB_LOG_LINES)
        )
        audit: JobAuditStore | None = None
        capability = getattr(store, "capability", None)
        if callable(capability):
            audit = capability(JobAuditStore)
        self._audit = audit
        self._buffer_size = buffer_size

    @property
    def stores_logs(self) -> bool:
        return self._audit is not None

    def create(self, context: JobLoggerContext) -> LoguruJobLogger:
        return LoguruJobLogger(
            context, self._audit, buffer_size=self._buffer_size, max_lines=self._max_lines
        )


__all__ = ["LoguruJobLogger", "LoguruJobLoggerFactory"]
