"""The jobs of ``bench_peers.py``, one module per system so that each worker process imports
only its own system: Ratchet's worker imports this module (no third-party import at all)."""

from __future__ import annotations

import time


def stamp(path: str) -> None:
    """Write the wall-clock time the job started at into ``path`` (enqueue-to-start runs)."""
    started = time.time()
    with open(path, "w", encoding="ascii") as out:
        out.write(repr(started))
