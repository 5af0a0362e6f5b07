"""PgQueuer's side of ``bench_peers.py``: its worker process.

``python -m benchmarks.peer_pgqueuer DSN MODE BATCH_SIZE`` runs PgQueuer's queue manager
(``MODE``: ``drain`` exits when the queue is empty, ``continuous`` runs until SIGINT/SIGTERM)
on one asyncpg connection, with a no-op entrypoint and a ``stamp`` entrypoint (writes its start
time to the path in the payload). PgQueuer 1.6's own ``pgq run`` command fails at start with
the Typer release installed here (its log-level option arrives as a string), so the worker is
started the way its documentation's Python examples do.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator

import asyncpg
from pgqueuer import AsyncpgDriver, PgQueuer
from pgqueuer.models import Job
from pgqueuer.types import QueueExecutionMode


async def main(dsn: str, mode: str, batch_size: int) -> None:
    connection = await asyncpg.connect(dsn)
    pgq = PgQueuer(AsyncpgDriver(connection))
    qm = pgq.qm  # the queue manager alone: PgQueuer.run's scheduler would never drain

    @qm.entrypoint("noop")
    async def noop(job: Job) -> None:
        """Does nothing."""

    @qm.entrypoint("stamp")
    async def stamp(job: Job) -> None:
        started = time.time()
        assert job.payload is not None
        with open(job.payload.decode(), "w", encoding="ascii") as out:
            out.write(repr(started))

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, pgq.shutdown.set)
    await qm.run(batch_size=batch_size, mode=QueueExecutionMode(mode))
    await connection.close()


@contextlib.asynccontextmanager
async def factory() -> AsyncIterator[PgQueuer]:
    """The same worker for PgQueuer's own command line, as its users start it:
    ``pgq --pg-dsn DSN run benchmarks.peer_pgqueuer:factory`` (``DSN`` also in
    ``RATCHET_BENCH_PGQ_DSN``). Needs the Typer release ``requirements-bench.txt`` pins."""
    connection = await asyncpg.connect(os.environ["RATCHET_BENCH_PGQ_DSN"])
    pgq = PgQueuer(AsyncpgDriver(connection))

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        """Does nothing."""

    try:
        yield pgq
    finally:
        await connection.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
