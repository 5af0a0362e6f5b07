"""Run by the streaming-batch crash test in its own process: stream ``count`` items into the
batch ``name`` (children run ``batch_targets.child``) in chunks of ``chunk`` (default 1,000),
then print DONE."""

from __future__ import annotations

import sys

from tests.engine import batch_targets as bt
from tests.engine.conftest import build_container


def main(url: str, name: str, count: int, log: str, chunk: int = 1000) -> None:
    container = build_container(url)
    scheduler = container.scheduler()
    scheduler.streaming_batch(name, range(count), lambda i: (bt.child, log, i)).chunk_size(
        chunk
    ).enqueue()
    print("DONE", flush=True)
    container.job_store().close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], *map(int, sys.argv[5:6]))
