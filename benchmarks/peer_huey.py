"""Huey's side of ``bench_peers.py``: a ``SqliteHuey`` on the file named by
``RATCHET_BENCH_HUEY_FILE`` (``huey_consumer benchmarks.peer_huey.huey``).

Durability: Huey's defaults, WAL and SQLite's default ``synchronous`` (FULL), unless
``RATCHET_BENCH_HUEY_FSYNC`` is ``0`` (``fsync=False``: ``synchronous=OFF``).
"""

from __future__ import annotations

import os

from huey import SqliteHuey

_FSYNC = os.environ.get("RATCHET_BENCH_HUEY_FSYNC")

huey = SqliteHuey(
    "bench",
    filename=os.environ.get("RATCHET_BENCH_HUEY_FILE", "huey-bench.db"),
    fsync=None if _FSYNC is None else _FSYNC == "1",
)


@huey.task()
def noop() -> None:
    """Does nothing."""
