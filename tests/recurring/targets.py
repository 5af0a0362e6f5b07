"""Job targets of the recurring tests (importable, allowed by the tests' ClassPolicy)."""

from __future__ import annotations

import os
from datetime import datetime


def tick(label: str = "") -> None:
    """Does nothing; the test counts the jobs."""


def record(path: str) -> None:
    """Append one line per execution (counts runs independently of the store)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{datetime.now().isoformat()}\n".encode())
    finally:
        os.close(fd)
