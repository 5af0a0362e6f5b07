"""Job targets of the crash tests. Each execution is written to a log kept outside Ratchet's
tables (one file, O_APPEND, one line per event: atomic), so the tests count executions without
trusting the store they test."""

from __future__ import annotations

import os
import time


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def record(path: str, number: int, sleep_ms: int, fail_first: bool = False) -> int:
    """Log ``S <number> <pid> <epoch>``, sleep ``sleep_ms``, then log ``E ...`` (or ``F ...``
    and raise, on the job's first execution when ``fail_first``)."""
    pid = os.getpid()
    _append(path, f"S {number} {pid} {time.time():.6f}\n")
    time.sleep(sleep_ms / 1000)
    if fail_first and not _has_failed(path, number):
        _append(path, f"F {number} {pid} {time.time():.6f}\n")
        raise RuntimeError(f"job {number}: planned failure of the first execution")
    _append(path, f"E {number} {pid} {time.time():.6f}\n")
    return number


def _has_failed(path: str, number: int) -> bool:
    with open(path, encoding="ascii") as fh:
        return any(line.startswith(f"F {number} ") for line in fh)
