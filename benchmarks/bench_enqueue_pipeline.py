"""The enqueue pipeline's bulk path: ``enqueue_many`` of 10,000 jobs, encryption off and on.

Usage::

    .venv/bin/python benchmarks/bench_enqueue_pipeline.py --backend all --jobs 10000 --repeats 5

Each round uses a fresh scratch database (see ``bench_engine.py``) and one container; after a
warm-up enqueue it times one ``scheduler.enqueue_many`` of ``--jobs`` jobs of
``tests.engine.targets.echo_any`` with a ~200-byte dict argument (the argument of
``bench_encryption.py``), once with encryption off and once with one AES-256-GCM key
(``encryption.mode`` auto: every payload sealed). Printed per backend and mode: jobs/s (median
and best of the rounds) and the CPU time of this process per job (median), which the load of
other processes on a shared machine disturbs much less than the wall clock.
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.engine import targets  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "bench_engine", REPO / "benchmarks" / "bench_engine.py"
)
assert _spec is not None and _spec.loader is not None
engine = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(engine)

ARGUMENT = {"order": 12345, "customer": "ada@example.com", "items": [f"sku-{i}" for i in range(12)]}


def one_round(backend: str, jobs: int, settings: dict[str, str]) -> tuple[float, float]:
    """(jobs/s, CPU microseconds per job) of one ``enqueue_many`` in a fresh database."""
    with engine.scratch(backend) as url:
        c = engine.container(url, **settings)
        scheduler, store = c.scheduler(), c.job_store()
        scheduler.enqueue_many(targets.echo_any, [(ARGUMENT,)])  # warm up
        items = [(ARGUMENT,) for _ in range(jobs)]
        cpu = time.process_time()
        started = time.perf_counter()
        ids = scheduler.enqueue_many(targets.echo_any, items)
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu
        assert len(ids) == jobs
        store.close()
    return engine.rate(jobs, elapsed), cpu / jobs * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "all"], default="all")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    backends = ["sqlite", "postgresql"] if args.backend == "all" else [args.backend]
    key = f"bench:{base64.b64encode(os.urandom(32)).decode()}"
    modes = {"off": {}, "on": {"encryption.keys": key}}
    print(f"load {engine.load()}; jobs={args.jobs}, repeats={args.repeats}")
    for backend in backends:
        for mode, settings in modes.items():
            rates, cpus = [], []
            for _ in range(args.repeats):
                rate, cpu = one_round(backend, args.jobs, settings)
                rates.append(rate)
                cpus.append(cpu)
            print(
                f"{backend:<10} encryption {mode:<3}: {statistics.median(rates):>8,.0f} / "
                f"{max(rates):>8,.0f} jobs/s (median / best); "
                f"CPU {statistics.median(cpus):6.1f} us/job"
            )
    print(f"load {engine.load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
