"""CPU time per job of one ``ratchet worker --burst`` process (issue 23).

Enqueues ``--jobs`` no-op jobs into a scratch database, runs one worker process with the
settings of ``bench_peers.py`` (``-c 16 --prefetch 64``, audit on) and prints the CPU time
(user + system, start-up included) the worker spent per job, read with
``getrusage(RUSAGE_CHILDREN)`` around it. A machine's load moves wall-clock rates 2-3x; it
moves CPU per job much less, so before/after comparisons of the worker's hot path read this.
``--code DIR`` runs the worker from another source tree (``DIR/<distribution>/src``), the
rest from this checkout, for an interleaved before/after in one run::

    .venv/bin/python benchmarks/bench_worker_cpu.py --backend sqlite --jobs 10000 --repeats 2
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_engine import RATCHET, REPO, container, load, scratch

from tests.engine import targets

DISTRIBUTIONS = ("ratchet_api", "ratchet_core", "ratchet_store_sql", "ratchet_store_mongo")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def worker_cpu_us(backend: str, jobs: int, code: str | None) -> float:
    with scratch(backend) as url:
        c = container(url)
        c.scheduler().enqueue_many(targets.noop, [() for _ in range(jobs)])
        c.job_store().close()
        settings = {
            "store.url": url,
            "security.allowed_packages": "tests.",
            "worker.claim_batch_size": "200",
            "worker.completion_batch_size": "1000",
            "worker.audit": "true",
        }
        command = [RATCHET]
        for key, value in settings.items():
            command += ["--set", f"{key}={value}"]
        command += ["worker", "--no-status", "--log-level", "WARNING"]
        command += ["--burst", "-c", "16", "--prefetch", "64"]
        paths = [str(Path(code) / d / "src") for d in DISTRIBUTIONS] if code else []
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([*paths, str(REPO)]))
        before = children_cpu()
        process = subprocess.run(command, env=env, check=False, capture_output=True)
        if process.returncode != 0:
            raise RuntimeError(process.stderr.decode()[-2000:])
        return (children_cpu() - before) / jobs * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--code", help="also run the worker from this source tree (before)")
    args = parser.parse_args(argv)
    print(f"load average {load()}; {args.backend}, {args.jobs} jobs")
    for _ in range(args.repeats):
        for name, code in (("this checkout", None), ("--code", args.code)):
            if name == "--code" and code is None:
                continue
            cpu = worker_cpu_us(args.backend, args.jobs, code)
            print(f"  {name:14} {cpu:8.0f} us CPU per job", flush=True)
    print(f"load average {load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
