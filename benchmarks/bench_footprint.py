"""Worker footprint and wake-up latency (issue 18): what one ``ratchet worker`` process costs.

    .venv/bin/python benchmarks/bench_footprint.py --backend all     # sqlite|postgresql|all

* **ready**: seconds from spawning ``ratchet worker`` to the ``started_at`` of a job that was
  already pending (process start, imports, container, store, schema check, first claim): the
  median of ``--starts`` runs;
* **peak RSS**: the worker's ``ru_maxrss`` (from ``os.wait4``) after running ``--jobs`` no-op
  jobs with ``-c 8 --prefetch 64`` in ``--burst`` mode;
* **latency**: enqueue-to-start (``started_at - created_at``) of single jobs enqueued one at a
  time into an idle worker (``-c 8 --prefetch 64``), p50/p99. The enqueuing process has no
  setting but the store URL: on PostgreSQL the wake-up comes from the database (the insert
  trigger's NOTIFY), elsewhere from polling.

Nothing here is asserted; the figures go to ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_engine import enqueue_to_start_ms, scratch  # noqa: E402
from tests.engine import targets  # noqa: E402

RATCHET = str(Path(sys.executable).with_name("ratchet"))


def _command(url: str, *args: str) -> list[str]:
    return [
        RATCHET,
        "--set",
        f"store.url={url}",
        "--set",
        "security.allowed_packages=tests.",
        "worker",
        "--no-status",
        "--log-level",
        "WARNING",
        "-c",
        "8",
        "--prefetch",
        "64",
        *args,
    ]


def _spawn(url: str, *args: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(_command(url, *args), env=env, cwd=tempfile.gettempdir())


def _container(url: str) -> Any:
    from ratchet_core.runtime.container import RatchetContainer

    return RatchetContainer(overrides={"store.url": url, "security.allowed_packages": "tests."})


def bench_ready(url: str, starts: int) -> float:
    c = _container(url)
    scheduler, store = c.scheduler(), c.job_store()
    readies: list[float] = []
    for _ in range(starts):
        job_id = scheduler.enqueue(targets.noop)
        spawned = datetime.now(UTC)
        process = _spawn(url, "--burst")
        if process.wait(120) != 0:
            raise RuntimeError(f"worker exited with {process.returncode}")
        job = store.find_by_id(job_id)
        assert job is not None and job.started_at is not None
        readies.append((job.started_at - spawned).total_seconds())
    store.close()
    return statistics.median(readies)


def bench_rss(url: str, jobs: int) -> float:
    c = _container(url)
    scheduler, store = c.scheduler(), c.job_store()
    scheduler.enqueue_many(targets.noop, [() for _ in range(jobs)])
    store.close()
    process = _spawn(url, "--burst")
    _pid, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"worker exited with {process.returncode}")
    return usage.ru_maxrss / 1024  # KiB on Linux


def bench_latency(url: str, samples: int) -> tuple[float, float]:

    c = _container(url)
    scheduler, store = c.scheduler(), c.job_store()
    process = _spawn(url)
    try:
        time.sleep(3.0)  # started and idle: the poll delay has grown to its maximum
        latencies = enqueue_to_start_ms(scheduler, store, samples, 0.02)
    finally:
        process.terminate()
        process.wait(30)
        c.cluster_coordinator().close()
    store.close()
    latencies.sort()
    return statistics.median(latencies), latencies[
        min(len(latencies) - 1, len(latencies) * 99 // 100)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "all"], default="all")
    parser.add_argument("--jobs", type=int, default=2_000)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--latency-samples", type=int, default=200)
    args = parser.parse_args(argv)
    backends = ["sqlite", "postgresql"] if args.backend == "all" else [args.backend]
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, python {sys.version.split()[0]}")
    print("| backend | ready (s, median) | peak RSS (MiB) | latency p50 / p99 (ms) |")
    print("|---|---:|---:|---:|")
    for backend in backends:
        with scratch(backend) as url:
            ready = bench_ready(url, args.starts)
        with scratch(backend) as url:
            rss = bench_rss(url, args.jobs)
        with scratch(backend) as url:
            p50, p99 = bench_latency(url, args.latency_samples)
        print(f"| {backend} | {ready:.2f} | {rss:.1f} | {p50:.1f} / {p99:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
