"""Batches: enqueue throughput of one large batch, and a streaming batch's memory.

    .venv/bin/python benchmarks/bench_batches.py --backend postgresql --children 100000 \\
        --stream 1000000

For the backend a scratch database is created (as ``bench_store.py`` does) and migrated.
Measured through the public API (``RatchetContainer().scheduler()``):

* **batch enqueue**: ``scheduler.batch(...).add_many(send_welcome_email, <children>).enqueue()``: one unit of
  work holding the batch, its parent job and every child (children/s, wall clock);
* **streaming**: ``scheduler.streaming_batch(..., range(<stream>), factory)`` with chunks of
  ``--chunk`` items, each chunk its own commit (items/s), and the process's peak RSS
  (``ru_maxrss``) before and after it: the growth is what the stream held in memory.

No worker runs: this measures writing the children. Not a test; nothing is asserted.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_store import scratch_database
from ratchet_core.demo_jobs import send_welcome_email
from ratchet_core.runtime.container import RatchetContainer
from ratchet_store_sql import migrate


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(backend: str, children: int, stream: int, chunk: int) -> None:
    with scratch_database(backend) as url:
        migrate(url)
        container = RatchetContainer(
            overrides={"store.url": url, "security.allowed_packages": "ratchet_core.demo_jobs"}
        )
        scheduler = container.scheduler()
        if children:
            started = time.perf_counter()
            scheduler.batch("bench").add_many(
                send_welcome_email, [(f"user{i}",) for i in range(children)]
            ).enqueue()
            elapsed = time.perf_counter() - started
            print(
                f"{backend}: batch enqueue of {children:,} children: {elapsed:.1f} s, "
                f"{children / elapsed:,.0f} children/s",
                flush=True,
            )
        if stream:
            before = peak_rss_mb()
            started = time.perf_counter()
            builder = scheduler.streaming_batch(
                "bench-stream", range(stream), lambda i: (send_welcome_email, f"user{i}")
            )
            builder.chunk_size(chunk).enqueue()
            elapsed = time.perf_counter() - started
            print(
                f"{backend}: streaming batch of {stream:,} items (chunks of {chunk}): "
                f"{elapsed:.1f} s, {stream / elapsed:,.0f} items/s; peak RSS {before:.0f} MB "
                f"before, {peak_rss_mb():.0f} MB after",
                flush=True,
            )
        container.job_store().close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="postgresql", choices=["sqlite", "postgresql"])
    parser.add_argument("--children", type=int, default=100_000)
    parser.add_argument("--stream", type=int, default=1_000_000)
    parser.add_argument("--chunk", type=int, default=1000)
    args = parser.parse_args()
    run(args.backend, args.children, args.stream, args.chunk)


if __name__ == "__main__":
    main()
