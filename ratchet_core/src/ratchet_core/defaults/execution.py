"""Execution defaults: argument resolution, concurrency tuning, adaptive polling, executors."""

from __future__ import annotations

import itertools
from datetime import timedelta
from uuid import UUID

from ratchet_api.model import JobInvocation, PollingConfig, ThreadingMode
from ratchet_api.spi import RatchetConfig, RatchetConfigKey
from ratchet_core.defaults.job_threads import DaemonThreadPool
from ratchet_core.runtime.config import parse_int, register_key, register_pattern

WORKER_CONCURRENCY = register_key(
    RatchetConfigKey(
        "worker.concurrency",
        parse_int(minimum=1),
        4,
        "Jobs of one execution type (sync, async or a target label) that may run at once on a "
        "node, unless worker.concurrency.<type> overrides it.",
    )
)
register_pattern(
    "worker.concurrency.<type>",
    "Per-execution-type concurrency override (worker.concurrency.async = 50, "
    "worker.concurrency.gpu = 1); env RATCHET_WORKER_CONCURRENCY_<TYPE>.",
)


def _parse_threading_mode(raw: str) -> ThreadingMode:
    try:
        return ThreadingMode(raw.strip().upper())
    except ValueError:
        choices = ", ".join(m.value.lower() for m in ThreadingMode)
        raise ValueError(f"expected one of {choices}, got {raw!r}") from None


WORKER_THREADING_MODE = register_key(
    RatchetConfigKey(
        "worker.threading_mode",
        _parse_threading_mode,
        ThreadingMode.THREADS,
        "How synchronous jobs run: threads (a bounded pool) or inline (on the poller thread, "
        "one at a time; tests and debugging).",
    )
)


def concurrency_key(execution_type: str) -> RatchetConfigKey[int]:
    """The key of the per-type override ``worker.concurrency.<type>``."""
    name = execution_type.strip().lower()
    if not name:
        raise ValueError("execution type must not be empty")
    return RatchetConfigKey(
        f"worker.concurrency.{name}",
        parse_int(minimum=1),
        0,
        f"concurrency of execution type {name}",
    )


class NoOpPreExecutionArgResolver:
    """Keeps the stored arguments (returns None)."""

    def resolve_arguments(self, job_id: UUID, invocation: JobInvocation) -> JobInvocation | None:
        return None


class DefaultExecutionTuningProvider:
    """Concurrency from configuration: ``worker.concurrency.<type>`` when set, else
    ``worker.concurrency`` when set in any source, else the engine's ``default_value``."""

    def __init__(self, settings: RatchetConfig) -> None:
        self._settings = settings

    def default_threading_mode(self) -> ThreadingMode:
        return self._settings.get(WORKER_THREADING_MODE)

    def max_concurrency(self, execution_type: str, default_value: int) -> int:
        key = concurrency_key(execution_type)
        if self._settings.raw(key) is not None:
            return self._settings.get(key)
        if self._settings.raw(WORKER_CONCURRENCY) is not None:
            return self._settings.get(WORKER_CONCURRENCY)
        return max(1, default_value)


class AdaptivePollingDelayStrategy:
    """Polls at ``min_interval`` while polls find work; after each empty poll the delay grows by
    ``backoff_factor`` up to ``max_interval``; ``reset`` (a wake-up) returns to the minimum.

    The n-th consecutive empty poll waits ``min_interval * backoff_factor ** (n - 1)``, capped.
    A poll that claimed nothing because no slot was free (``capacity == 0``) is not idleness:
    the delay stays at the minimum so freed slots are refilled quickly. Not thread safe: one
    poller thread owns it.
    """

    def __init__(self, config: PollingConfig) -> None:
        if config.min_interval < timedelta(0):
            raise ValueError("min_interval must not be negative")
        if config.max_interval < config.min_interval:
            raise ValueError(
                f"max_interval {config.max_interval} must not be below "
                f"min_interval {config.min_interval}"
            )
        if config.backoff_factor < 1.0:
            raise ValueError(f"backoff_factor must be >= 1.0, got {config.backoff_factor}")
        self.config = config
        self._empty_polls = 0

    def next_delay(self, claimed: int, capacity: int) -> timedelta:
        if claimed > 0 or capacity <= 0:
            self._empty_polls = 0
            return self.config.min_interval
        self._empty_polls += 1
        exponent = min(self._empty_polls - 1, 64)
        seconds = self.config.min_interval.total_seconds() * self.config.backoff_factor**exponent
        return min(timedelta(seconds=min(seconds, 1e9)), self.config.max_interval)

    def reset(self) -> None:
        self._empty_polls = 0


class DefaultPollingStrategyProvider:
    """Creates an :class:`AdaptivePollingDelayStrategy`."""

    def create(self, config: PollingConfig) -> AdaptivePollingDelayStrategy:
        return AdaptivePollingDelayStrategy(config)


class DefaultExecutorProvider:
    """A :class:`~ratchet_core.defaults.job_threads.DaemonThreadPool` per request (daemon
    threads: a job still running after ``worker.shutdown_timeout`` never keeps the process
    alive), threads named ``ratchet-job-<n>_<i>`` so that thread dumps and logs show which pool
    a thread belongs to."""

    def __init__(self, thread_name_prefix: str = "ratchet-job") -> None:
        self._prefix = thread_name_prefix
        self._counter = itertools.count(1)

    def job_executor(self, max_workers: int) -> DaemonThreadPool:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        return DaemonThreadPool(
            max_workers=max_workers, thread_name_prefix=f"{self._prefix}-{next(self._counter)}"
        )


__all__ = [
    "WORKER_CONCURRENCY",
    "WORKER_THREADING_MODE",
    "AdaptivePollingDelayStrategy",
    "DefaultExecutionTuningProvider",
    "DefaultExecutorProvider",
    "DefaultPollingStrategyProvider",
    "NoOpPreExecutionArgResolver",
    "concurrency_key",
]
