"""Run by the streaming-batch crash test in its own process: stream ``count`` items into the
batch ``name`` (children run ``batch_targets.child``) in chunks of ``chunk`` (default 1,000),
then print DONE. With ``STREAM_GATE`` set to a path, the item ``count // 2`` waits until that
file exists, so that a test's SIGKILL always comes mid-stream."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tests.engine import batch_targets as bt
from tests.engine.conftest import build_container


def items(count: int) -> Iterator[int]:
    gate = os.environ.get("STREAM_GATE")
    for i in range(count):
        if gate and i == count // 2:
            while not Path(gate).exists():
                time.sleep(0.05)
        yield i


def main(url: str, name: str, count: int, log: str, chunk: int = 1000) -> None:
    container = build_container(url)
    scheduler = container.scheduler()
    scheduler.streaming_batch(name, items(count), lambda i: (bt.child, log, i)).chunk_size(
        chunk
    ).enqueue()
    print("DONE", flush=True)
    container.job_store().close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], *map(int, sys.argv[5:6]))
