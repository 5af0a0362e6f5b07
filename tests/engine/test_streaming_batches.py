"""Streaming batches: chunk by chunk, resumable by name without duplicates, a failed chunk
reported, and a crash of the enqueuing process midway."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ratchet_api.errors import BatchChunkError, InvalidJobError
from ratchet_api.store import BatchStatus, BatchStore, JobQuery, JobQueryStore
from ratchet_core.features.streaming import BatchChunkFailure, streaming_batch_id
from tests.engine import batch_targets as bt
from tests.engine.conftest import build_container, migrate

REPO = Path(__file__).resolve().parents[2]


def batches(engine: Any) -> BatchStore:
    found = engine.job_store().capability(BatchStore)
    assert found is not None
    return found


def children(engine: Any, batch_id: Any) -> int:
    queries = engine.job_store().capability(JobQueryStore)
    assert queries is not None
    return int(queries.count_jobs(JobQuery(batch_id=batch_id)))


def test_stream_runs_every_item_and_completes(
    engine: Any, make_worker: Any, tmp_path: Path
) -> None:
    log = str(tmp_path / "calls.log")
    scheduler = engine.scheduler()
    name = f"stream-{tmp_path.name}"
    batch_id = (
        scheduler.streaming_batch(name, iter(range(250)), lambda i: (bt.child, log, i))
        .chunk_size(100)
        .on_complete(bt.callback, log, "complete")
        .enqueue()
    )
    assert batch_id == streaming_batch_id(name)
    found = batches(engine).find_batch(batch_id)
    assert found is not None and (found.status, found.total) == (BatchStatus.SEALED, 250)
    make_worker(engine).start()
    deadline = time.monotonic() + 120
    while "callback complete" not in bt.lines(log):
        assert time.monotonic() < deadline, "the streaming batch never completed"
        time.sleep(0.1)
    assert len({x for x in bt.lines(log) if x.startswith("child ")}) == 250


def test_failed_chunk_is_reported_and_a_rerun_resumes_without_duplicates(
    engine: Any, tmp_path: Path
) -> None:
    log = str(tmp_path / "calls.log")
    scheduler = engine.scheduler()
    name = f"resume-{tmp_path.name}"
    seen: list[BatchChunkFailure] = []
    calls: list[int] = []

    def broken(i: int) -> tuple[Any, ...]:
        calls.append(i)
        if i == 250:
            raise ValueError("item 250 is corrupt")
        return (bt.child, log, i)

    with pytest.raises(BatchChunkError, match="chunk 2") as caught:
        scheduler.streaming_batch(name, range(500), broken).chunk_size(100).on_chunk_failure(
            seen.append
        ).enqueue()
    assert caught.value.first_item == 200
    assert [(e.chunk, e.first_item) for e in seen] == [(2, 200)]
    batch_id = streaming_batch_id(name)
    found = batches(engine).find_batch(batch_id)
    assert found is not None and found.status is BatchStatus.OPEN
    assert found.total == 200 and "item 250 is corrupt" in (found.last_error or "")
    assert children(engine, batch_id) == 200

    calls.clear()
    again = scheduler.streaming_batch(name, range(500), lambda i: (bt.child, log, i))
    assert again.chunk_size(100).enqueue() == batch_id
    done = batches(engine).find_batch(batch_id)
    assert done is not None and (done.status, done.total) == (BatchStatus.SEALED, 500)
    assert children(engine, batch_id) == 500
    # a finished stream is not written again
    scheduler.streaming_batch(name, range(500), broken).enqueue()
    assert calls == [], "the factory ran for items already committed"
    assert children(engine, batch_id) == 500


def test_streaming_batch_refuses_bad_arguments(engine: Any) -> None:
    scheduler = engine.scheduler()
    with pytest.raises(InvalidJobError, match="iterable"):
        scheduler.streaming_batch("x", 5, lambda i: (bt.child, "p", i))
    with pytest.raises(InvalidJobError, match="chunk_size"):
        scheduler.streaming_batch("x", [], lambda i: i).chunk_size(0)
    with pytest.raises(BatchChunkError, match="return \\(fn, \\*args\\)"):
        scheduler.streaming_batch("x-bad", [1], lambda i: "nope").enqueue()


@pytest.mark.slow
def test_sigkilled_enqueuer_resumes_with_exactly_every_child(
    store_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # bounded suite time (the SecantusDB test server writes a 1,000-job chunk in seconds);
    # benchmarks/bench_batches.py streams 1,000,000 items
    mongo = "mongodb" in request.node.callspec.id
    count = 2_000 if mongo else 20_000
    # many chunks, so that the kill comes while most of them are still to be written
    chunk = 100 if mongo else 1_000
    container = build_container(store_url)
    store = container.job_store()
    migrate(store)
    name = f"killed-{tmp_path.name}-{os.getpid()}"
    batch_id = streaming_batch_id(name)
    log = str(tmp_path / "calls.log")
    gate = tmp_path / "go-on"  # the first enqueuer waits at half the items: killed there
    env = dict(os.environ, PYTHONPATH=str(REPO), STREAM_GATE=str(gate))
    command = [
        sys.executable,
        "-m",
        "tests.engine.streaming_script",
        store_url,
        name,
        str(count),
        log,
        str(chunk),
    ]
    try:
        first = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        found_store = store.capability(BatchStore)
        assert found_store is not None
        deadline = time.monotonic() + 300
        while True:
            batch = found_store.find_batch(batch_id)
            if batch is not None and batch.total >= count // 5:
                break
            if first.poll() is not None:
                errors = first.stderr.read().decode()[-3000:] if first.stderr else ""
                raise AssertionError(f"the enqueuer ended before it was killed: {errors}")
            assert time.monotonic() < deadline, "the enqueuer made no progress"
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        killed = found_store.find_batch(batch_id)
        assert killed is not None and killed.status is BatchStatus.OPEN
        assert killed.total < count, "the enqueuer finished before it was killed"
        gate.touch()
        second = subprocess.run(
            command, check=False, cwd=REPO, env=env, capture_output=True, timeout=900
        )
        assert b"DONE" in second.stdout, second.stderr.decode()[-2000:]
        done = found_store.find_batch(batch_id)
        assert done is not None and (done.status, done.total) == (BatchStatus.SEALED, count)
        queries = store.capability(JobQueryStore)
        assert queries is not None
        assert queries.count_jobs(JobQuery(batch_id=batch_id)) == count
    finally:
        container.shutdown_resources()
        store.close()
