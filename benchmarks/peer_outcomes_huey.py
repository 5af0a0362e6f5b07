"""Huey's side of ``bench_outcomes.py``: a ``SqliteHuey`` (Huey's default durability: WAL,
``synchronous`` FULL) on the file named by ``RATCHET_BENCH_HUEY_FILE``, with a ``flaky`` task
that raises when told to (no retries: Huey's default)."""

from __future__ import annotations

import os

from huey import SqliteHuey

huey = SqliteHuey("bench", filename=os.environ.get("RATCHET_BENCH_HUEY_FILE", "huey-bench.db"))


@huey.task()
def flaky(fail: bool) -> None:
    """Does nothing, or raises."""
    if fail:
        raise RuntimeError("fails on purpose")
