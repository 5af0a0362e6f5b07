"""Job targets and branch predicates of the workflow and signal tests (importable: the test
ClassPolicy allows ``tests.``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from ratchet_api.model import JobResult
from ratchet_api.scheduler import JobContext
from ratchet_api.workflow import ParentError, ParentResult, SignalPayload


def double(n: int) -> int:
    return n * 2


def add_one(value: ParentResult[int]) -> int:
    return value + 1


def describe(value: ParentResult[int], *, prefix: str = "v") -> str:
    return f"{prefix}={value}"


def label(name: str) -> str:
    return name


def explode(message: str) -> None:
    raise RuntimeError(f"boom: {message} password=hunter2")


def report_error(error: ParentError, tag: str) -> str:
    return f"{tag}: {error}"


def report_success(value: ParentResult[int]) -> str:
    return f"ok {value}"


def is_big(threshold: int, result: JobResult) -> bool:
    return bool(result.succeeded and result.value > threshold)


def approve(payload: SignalPayload[dict[str, str]], order: int) -> str:
    if payload is None:
        return f"order {order}: no signal"
    return f"order {order}: {payload['by']}"


def approve_with_context(order: int, ctx: JobContext) -> str:
    payload = ctx.signal_payload()
    return f"order {order} via context: {payload}"


def record(path: str, line: str) -> str:
    """Append ``line`` to ``path`` (one line per execution, O_APPEND)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
    return line


def record_after(path: str, line: str, value: ParentResult[str]) -> str:
    return record(path, f"{line} after {value}")


def slow_record(path: str, line: str, seconds: float) -> str:
    record(path, f"start {line}")
    time.sleep(seconds)
    return line


def touch(path: str) -> None:
    Path(path).touch()
