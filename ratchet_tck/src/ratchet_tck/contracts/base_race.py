"""Running one action from many threads released together."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def race(callers: int, action: Callable[[int], T]) -> list[T]:
    """Call ``action(i)`` from ``callers`` threads released by one barrier; return the results
    (in completion order). Fails the test if a caller raised or hung."""
    barrier = threading.Barrier(callers)
    results: list[T] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=30)
            value = action(index)
        except BaseException as exc:  # noqa: BLE001 - re-raised as the test failure below
            with lock:
                errors.append(exc)
            return
        with lock:
            results.append(value)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, f"a racing caller raised {errors[0]!r}"
    assert len(results) == callers, "a racing caller hung"
    return results
