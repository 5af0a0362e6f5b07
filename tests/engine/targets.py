"""Importable job targets for the engine tests (E1 owns this module; E2 may add functions at the
end). Everything here lives under ``tests.``, which the test containers allow in the ClassPolicy.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import threading
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

import attrs

from ratchet_api import JobContext
from ratchet_api.model import BackoffPolicy, NodeIdentity


@attrs.frozen(kw_only=True)
class Order:
    id: int
    item: str
    price: Decimal


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


@dataclasses.dataclass(frozen=True)
class Shipment:
    order: Order
    shipped_at: datetime
    tracking: UUID
    color: Color = Color.RED


# A process-local record of calls, for tests that run jobs in this process.
CALLS: list[tuple[str, Any]] = []
_CALLS_LOCK = threading.Lock()


def record(name: str, value: Any) -> None:
    with _CALLS_LOCK:
        CALLS.append((name, value))


def add(a: int, b: int) -> int:
    return a + b


def greet(name: str, punctuation: str = "!") -> str:
    return f"hello {name}{punctuation}"


def echo(value):  # type: ignore[no-untyped-def]  # deliberately without hints: raw JSON values
    return value


def echo_any(value: Any) -> Any:
    return value


def total_price(orders: list[Order]) -> str:
    """Needs real ``Order`` instances (attribute access fails on dicts)."""
    return str(sum((o.price for o in orders), Decimal(0)))


def order_items(orders: dict[str, Order]) -> list[str]:
    return sorted(f"{key}={order.item}" for key, order in orders.items())


def nested_shapes(groups: list[set[str]], pair: tuple[int, ...]) -> list[Any]:
    return [sorted(type(g).__name__ for g in groups), type(pair).__name__, sum(pair)]


def ship(shipment: Shipment) -> str:
    return f"{shipment.order.item}:{shipment.color.value}:{shipment.shipped_at.isoformat()}"


def fail_always(message: str) -> None:
    raise RuntimeError(message)


async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


def uses_context(x: int, ctx: JobContext) -> int:
    ctx.logger.info(f"running with {x}")
    return x * 2


def takes_outside_class(policy: BackoffPolicy) -> str:
    """Its hint names ``ratchet_api.model.BackoffPolicy``, outside the ``tests.`` allowlist."""
    return str(policy.kind)


class Calculator:
    """A class the container provides (non-static targets are methods of it)."""

    def __init__(self) -> None:
        self.factor = 10

    def scale(self, value: int) -> int:
        return value * self.factor

    @staticmethod
    def double(value: int) -> int:
        return value * 2

    @classmethod
    def triple(cls, value: int) -> int:
        return value * 3


def _private_target() -> None:
    return None


def make_closure(offset: int) -> Any:
    def inner(value: int) -> int:
        return value + offset

    return inner


def make_nested() -> Any:
    def nested(value: int) -> int:
        return value

    return nested


# ---------------------------------------------------------------- E2 may add targets below


# E2 (worker side) targets.
_ATTEMPTS: dict[str, int] = {}
GATES: dict[str, threading.Event] = {}
STARTED: dict[str, threading.Event] = {}


def flaky(key: str, failures: int) -> str:
    """Fails the first ``failures`` calls for ``key`` (in this process), then succeeds."""
    with _CALLS_LOCK:
        _ATTEMPTS[key] = _ATTEMPTS.get(key, 0) + 1
        count = _ATTEMPTS[key]
    if count <= failures:
        raise ConnectionError(f"{key}: transient failure {count}")
    return f"{key} ok after {count}"


def gate(key: str) -> str:
    """Signals ``STARTED[key]`` then blocks until ``GATES[key]`` is set (at most 30 s)."""
    with _CALLS_LOCK:
        started = STARTED.setdefault(key, threading.Event())
        release = GATES.setdefault(key, threading.Event())
    started.set()
    release.wait(30)
    return key


def append_line(path: str, number: int, sleep_ms: int) -> int:
    """Appends ``number`` as one line (O_APPEND: atomic per line) then sleeps ``sleep_ms``.
    Crash tests read the file to count executions per job."""
    import os
    import time

    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{number}\n".encode())
    finally:
        os.close(fd)
    time.sleep(sleep_ms / 1000)
    return number


def noop() -> None:
    """Does nothing (benchmarks)."""


async def async_sleep_echo(value: int, ms: int) -> int:
    await asyncio.sleep(ms / 1000)
    return value


def bulk_item(n: int) -> int:
    """Only enqueued by the bulk-enqueue test (it counts jobs by this target)."""
    return n


def bulk_text(text: str) -> str:
    """Only enqueued by the bulk-parts test (it counts jobs by this target)."""
    return text


def describe_node(node: NodeIdentity) -> str:
    """Its hint names ``ratchet_api.model.NodeIdentity``, outside the ``tests.`` allowlist."""
    return f"{node.node_id}@{node.host}"


ASYNC_RUNNING: dict[str, int] = {}
ASYNC_PEAK: dict[str, int] = {}


async def async_overlap(key: str, value: int, ms: int) -> int:
    """Records how many coroutines of ``key`` run at once (``ASYNC_PEAK[key]``)."""
    ASYNC_RUNNING[key] = ASYNC_RUNNING.get(key, 0) + 1
    ASYNC_PEAK[key] = max(ASYNC_PEAK.get(key, 0), ASYNC_RUNNING[key])
    await asyncio.sleep(ms / 1000)
    ASYNC_RUNNING[key] -= 1
    return value


def exits(code: int) -> None:
    """Calls ``sys.exit`` as scripts (and click/argparse code) do: a ``BaseException``."""
    import sys

    sys.exit(code)


async def async_cancelled() -> None:
    """Raises ``asyncio.CancelledError`` from inside the job (an awaited task was cancelled)."""
    task = asyncio.ensure_future(asyncio.sleep(10))
    task.cancel()
    await task


RUNS: dict[str, int] = {}


def first_gated_then_slow(key: str, slow_ms: int) -> int:
    """The first call for ``key`` blocks until ``GATES[key]`` is set (at most 30 s); later
    calls sleep ``slow_ms``. Returns the call's number (``RUNS[key]`` counts the calls)."""
    import time

    with _CALLS_LOCK:
        RUNS[key] = number = RUNS.get(key, 0) + 1
        started = STARTED.setdefault(key, threading.Event())
        release = GATES.setdefault(key, threading.Event())
    if number == 1:
        started.set()
        release.wait(30)
    else:
        time.sleep(slow_ms / 1000)
    return number


def endless(marker: str) -> None:
    """Touches ``marker`` when it starts, then never returns (a job stuck in a loop)."""
    import pathlib
    import time

    pathlib.Path(marker).touch()
    while True:
        time.sleep(0.05)


def log_tracebacks(times: int) -> int:
    """Logs ``times`` tracebacks through the standard ``logging`` module on the job's thread."""
    import logging

    log = logging.getLogger("tests.engine.jobs")
    for n in range(times):
        try:
            raise RuntimeError(f"failure {n} inside a job")
        except RuntimeError:
            log.exception("job failure %d", n)
    return times


BREAKER_CALLS: list[int] = []


def guarded_call(n: int) -> int:
    """Decorated with ``@circuit_breaker(service="tests-guarded")`` below; records its calls."""
    with _CALLS_LOCK:
        BREAKER_CALLS.append(n)
    return n


def _guard() -> None:
    from ratchet_core.enqueue.invocation import circuit_breaker

    circuit_breaker(service="tests-guarded")(guarded_call)


_guard()
