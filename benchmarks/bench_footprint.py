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

``--imports`` prints instead the resident memory a worker's imports add, one step at a time in a
fresh interpreter per backend (``VmRSS`` after each import, in the order a worker needs them),
and which of SQLAlchemy's dialect packages got loaded::

    .venv/bin/python benchmarks/bench_footprint.py --imports

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


IMPORT_STEPS = {
    "postgresql": (
        "sqlalchemy",
        "sqlalchemy.dialects.postgresql.psycopg",
        "psycopg",
        "cattrs",
        "ratchet_api.store",
        "ratchet_store_sql.store",
        "ratchet_core",
        "ratchet_core.worker",
        "ratchet_core.cli",
        "ratchet_core.cli.worker",
    ),
    "sqlite": (
        "sqlalchemy",
        "sqlalchemy.dialects.sqlite.pysqlite",
        "cattrs",
        "ratchet_api.store",
        "ratchet_store_sql.store",
        "ratchet_core",
        "ratchet_core.worker",
        "ratchet_core.cli",
        "ratchet_core.cli.worker",
    ),
}

_STEP_SCRIPT = """
import importlib, sys
def rss():
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0
print(f"python\t{rss():.1f}\t{len(sys.modules)}")
for name in sys.argv[1:]:
    importlib.import_module(name)
    print(f"{name}\t{rss():.1f}\t{len(sys.modules)}")
dialects = sorted({m.split(".")[2] for m in sys.modules if m.startswith("sqlalchemy.dialects.")
                   and m.count(".") >= 2})
print("dialects\t" + ",".join(dialects))
"""


def bench_imports(backend: str) -> None:
    """Print the RSS after each of a worker's imports (a fresh interpreter)."""
    out = subprocess.run(
        [sys.executable, "-c", _STEP_SCRIPT, *IMPORT_STEPS[backend]],
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
    ).stdout
    print(f"\n{backend}: | import | RSS (MiB) | added | modules |")
    print("|---|---:|---:|---:|")
    previous = 0.0
    for line in out.splitlines():
        name, *rest = line.split("\t")
        if name == "dialects":
            print(f"SQLAlchemy dialect packages loaded: {rest[0] or 'none'}")
            continue
        rss, modules = float(rest[0]), int(rest[1])
        added = f"+{rss - previous:.1f}" if previous else ""
        print(f"| {name} | {rss:.1f} | {added} | {modules} |")
        previous = rss


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "all"], default="all")
    parser.add_argument("--jobs", type=int, default=2_000)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--latency-samples", type=int, default=200)
    parser.add_argument(
        "--imports", action="store_true", help="only the RSS each import of a worker adds"
    )
    args = parser.parse_args(argv)
    backends = ["sqlite", "postgresql"] if args.backend == "all" else [args.backend]
    if args.imports:
        for backend in backends:
            bench_imports(backend)
        return 0
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
