"""Worker fixtures (E2), imported by ``tests/engine/conftest.py``.

``make_worker(container, **settings)`` builds a worker from the container with fast test
timings (short polls, heartbeats and flushes) and stops every worker it made at teardown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from ratchet_api.model import PollingConfig


def fast_settings(**changes: Any) -> Any:
    from ratchet_core.worker import WorkerSettings

    values: dict[str, Any] = {
        "concurrency": 4,
        "prefetch": 4,
        "polling": PollingConfig(
            min_interval=timedelta(milliseconds=10), max_interval=timedelta(milliseconds=100)
        ),
        "heartbeat_interval": timedelta(milliseconds=300),
        "node_timeout": timedelta(seconds=2),
        "recovery_interval": timedelta(milliseconds=300),
        "shutdown_timeout": timedelta(seconds=5),
        "flush_interval": timedelta(milliseconds=2),
    }
    values.update(changes)
    return WorkerSettings(**values)


@pytest.fixture
def make_worker() -> Iterator[Callable[..., Any]]:
    made: list[Any] = []

    def factory(container: Any, **changes: Any) -> Any:
        worker = container.worker(worker_settings=fast_settings(**changes))
        made.append(worker)
        return worker

    yield factory
    for worker in made:
        worker.stop(timeout=5)


__all__ = ["fast_settings", "make_worker"]
