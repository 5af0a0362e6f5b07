"""PgQueuer's worker for ``bench_outcomes.py``: ``python -m benchmarks.peer_outcomes_pgq DSN
BATCH_SIZE`` drains the queue with a ``flaky`` entrypoint that raises when its payload is
``b"1"`` (PgQueuer then logs the job as failed and removes it, its own dead letter)."""

from __future__ import annotations

import asyncio
import sys

import asyncpg
from pgqueuer import AsyncpgDriver, PgQueuer
from pgqueuer.models import Job
from pgqueuer.types import QueueExecutionMode


async def main(dsn: str, batch_size: int) -> None:
    connection = await asyncpg.connect(dsn)
    pgq = PgQueuer(AsyncpgDriver(connection))
    qm = pgq.qm

    @qm.entrypoint("flaky")
    async def flaky(job: Job) -> None:
        if job.payload == b"1":
            raise RuntimeError(f"job {job.id} fails on purpose")

    await qm.run(batch_size=batch_size, mode=QueueExecutionMode.drain)
    await connection.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
