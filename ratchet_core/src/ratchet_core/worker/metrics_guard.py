"""A ``MetricsCollector`` wrapper that never lets a collector's exception change a job's
outcome."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from ratchet_api.spi import MetricsCollector

_log = logging.getLogger("ratchet.worker")


class GuardedMetrics:
    """Forwards every call to a ``MetricsCollector``; an exception it raises is logged (once
    per method) and swallowed, so a failing collector cannot leave a job stuck RUNNING. Each
    method's guard is built on its first call and kept."""

    def __init__(self, inner: MetricsCollector) -> None:
        self._inner = inner
        self._reported: set[str] = set()
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Callable[..., None]:
        method = getattr(self._inner, name)
        if not callable(method):
            return method  # type: ignore[no-any-return]

        def guarded(*args: Any, **kwargs: Any) -> None:
            try:
                method(*args, **kwargs)
            except Exception:  # noqa: BLE001 - metrics are best effort
                with self._lock:
                    first = name not in self._reported
                    self._reported.add(name)
                if first:
                    _log.exception(
                        "metrics collector %s.%s failed (ignored; reported once)",
                        type(self._inner).__name__,
                        name,
                    )

        # kept on the instance: the next call of this method finds it without __getattr__
        # (a closure built per call cost about as much as the call to a no-op collector)
        self.__dict__[name] = guarded
        return guarded


__all__ = ["GuardedMetrics"]
