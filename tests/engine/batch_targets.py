"""Job targets of the batch and flow-control tests. They record what happened in files (one
line per call, appended with O_APPEND) so that workers in other threads or processes can be
observed from the test."""

from __future__ import annotations

import os
import time


def append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def child(path: str, index: int) -> int:
    append(path, f"child {index}")
    return index


def failing_child(path: str, index: int) -> None:
    append(path, f"failed {index}")
    raise RuntimeError(f"child {index} fails")


def callback(path: str, label: str) -> None:
    append(path, f"callback {label}")


def hold(path: str, index: int, seconds: float) -> None:
    """Record start and finish times (monotonic across processes: CLOCK_MONOTONIC)."""
    append(path, f"start {index} {time.monotonic():.6f}")
    time.sleep(seconds)
    append(path, f"finish {index} {time.monotonic():.6f}")


def stamp(path: str, index: int) -> None:
    append(path, f"run {index} {time.time():.6f}")


def lines(path: str) -> list[str]:
    try:
        with open(path) as f:
            return [line.rstrip("\n") for line in f]
    except FileNotFoundError:
        return []
