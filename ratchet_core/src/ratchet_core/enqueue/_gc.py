"""The cyclic garbage collector paused while a bulk enqueue builds its jobs.

A bulk of 10,000 jobs allocates tens of thousands of container objects (invocations, entities,
rows), none of them in a reference cycle. Each allocation past the collector's threshold starts
a collection, and the older generations' collections walk every tracked object of the process
(SQLAlchemy's and the application's module graphs): about a fifth of a bulk enqueue's time on
PostgreSQL, measured (benchmarks/README.md, "Bulk enqueue"). Reference counting still frees
everything as usual while the collector is paused; only cycles wait for the next collection.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

PAUSE_FROM = 256
"""Bulks of at least this many jobs pause the collector; smaller ones allocate too little."""


@contextmanager
def collector_paused(count: int) -> Iterator[None]:
    """Pause the cyclic collector around building and writing ``count`` jobs, when ``count``
    reaches :data:`PAUSE_FROM` and the collector is on; it is switched on again afterwards,
    also on error. A collector that was off (the application's choice), or that another
    thread's bulk paused, is left as it is."""
    if count < PAUSE_FROM or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


__all__ = ["PAUSE_FROM", "collector_paused"]
