"""What building a worker costs (issue 23: its parts come from the ``worker_parts`` container).

    .venv/bin/python benchmarks/bench_worker_parts.py --base c929074 --rounds 5

Each round runs, one after the other in fresh interpreters, the base commit's sources (exported
with ``git archive`` and put first on ``PYTHONPATH``) and this tree's, on the TCK memory store:

* **container**: ``RatchetContainer(...)`` (now also copying the ``WorkerParts`` template);
* **imports**: dependency-injector, the Ratchet container's module, the TCK memory store;
* **first**: the first ``container.worker()`` (imports of the engine included);
* **start**: its ``start()``;
* **total**: from the first import to the first worker's ``start()`` returned
  (imports, container, build, the worker, its start: the parts' modules are imported by then
  on both sides, where the base imports some when the worker is built, this tree at start);
* **worker**: the median of the next ``--workers`` ``container.worker()`` calls (not started);
* **worker, one part overridden** (this tree only): the same with
  ``container.worker_parts.completer`` overridden, so every worker copies the override too.

Nothing here is asserted; the figures go to ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("ratchet_api/src", "ratchet_core/src", "ratchet_tck/src", "ratchet_store_sql/src")

CHILD = """
import json, statistics, sys, time
t0 = time.perf_counter()
from dependency_injector import providers
from ratchet_core.runtime.container import RatchetContainer
from ratchet_tck.memory import InMemoryJobStore
override = sys.argv[2] == "1"
t1 = time.perf_counter()
container = RatchetContainer(overrides={"store.url": "sqlite:///unused.db"})
t2 = time.perf_counter()
container.job_store.override(providers.Object(InMemoryJobStore()))
if override:
    from ratchet_core.worker.completion import CompletionBatcher
    parts = container.worker_parts
    container.worker_parts.completer.override(
        providers.Factory(CompletionBatcher, parts.store, interval=0.01, batch_size=10,
                          metrics=parts.metrics, subscribers=providers.List(parts.subscriber))
    )
container.build()
t3 = time.perf_counter()
first = container.worker()
t4 = time.perf_counter()
first.start()
t5 = time.perf_counter()
first.stop()
times = []
for _ in range(int(sys.argv[1])):
    started = time.perf_counter()
    container.worker()
    times.append(time.perf_counter() - started)
print(json.dumps({"imports": t1 - t0, "container": t2 - t1, "first": t4 - t3,
                  "start": t5 - t4, "total": t5 - t0, "worker": statistics.median(times)}))
"""


def _export(commit: str, into: Path) -> Path:
    archive = into / "base.tar"
    with archive.open("wb") as out:
        subprocess.run(
            ["git", "-C", str(REPO), "archive", commit, *SOURCES], stdout=out, check=True
        )
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    # byte-compiled like this tree (imports must not be compiled on every run)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(into)], check=True)
    return into


def _run(root: Path, workers: int, override: bool) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(root / s) for s in SOURCES))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(workers), "1" if override else "0"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=tempfile.gettempdir(),
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", default="main")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        base = _export(args.base, Path(scratch))
        variants = {"base": (base, False), "branch": (REPO, False), "branch+override": (REPO, True)}
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
        for _ in range(args.rounds):
            for name, (root, override) in variants.items():
                runs[name].append(_run(root, args.workers, override))
    print(f"load average {os.getloadavg()[0]:.2f}; medians of {args.rounds} rounds")
    columns = ("imports", "container", "first", "start", "total")
    print(f"{'variant':<16} " + " ".join(f"{c + ' ms':>12}" for c in columns) + "   worker us")
    for name, results in runs.items():
        cells = [statistics.median(r[c] for r in results) * 1e3 for c in columns]
        worker = statistics.median(r["worker"] for r in results) * 1e6
        print(f"{name:<16} " + " ".join(f"{v:>12.1f}" for v in cells) + f" {worker:>11.0f}")


if __name__ == "__main__":
    main()
