"""Worker fixtures (E2), imported by ``tests/engine/conftest.py``.

``make_worker(container, **settings)`` builds a worker from the container with fast test
timings (short polls, heartbeats and flushes) and stops every worker it made at teardown.
``start_workers(container, count, **settings)`` builds ``count`` such workers with timings a slow
store does not mistake for dead nodes, then starts them. ``wait_for(check, timeout, what)``
polls until ``check()`` returns something truthy and returns it.
"""

from __future__ import annotations

import time
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


@pytest.fixture
def start_workers(make_worker: Callable[..., Any]) -> Callable[..., list[Any]]:
    # A slow store (the Mongo test server on a loaded machine) answers a heartbeat late: with the
    # fast timings its workers would look dead and their jobs would be recovered (and counted as
    # another attempt) while they run.
    def start(container: Any, count: int, **changes: Any) -> list[Any]:
        settings: dict[str, Any] = {
            "heartbeat_interval": timedelta(seconds=1),
            "node_timeout": timedelta(seconds=30),
        }
        settings.update(changes)
        workers = [make_worker(container, **settings) for _ in range(count)]
        for worker in workers:
            worker.start()
        return workers

    return start


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


__all__ = ["fast_settings", "make_worker", "start_workers", "wait_for"]
