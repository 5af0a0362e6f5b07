"""Processing with failing jobs, and what each job costs the database (issue 23).

Usage (the peers as for ``bench_peers.py``: ``.venv-peers``, installed beforehand)::

    .venv/bin/python benchmarks/bench_outcomes.py                         # both backends
    .venv/bin/python benchmarks/bench_outcomes.py --backend postgresql --before /tmp/before

One worker process per system drains ``--jobs`` jobs of which 0 % and ``--fail`` % raise
(no retries on any side: a failing job is dead-lettered by Ratchet, logged as failed and
removed by PgQueuer, dropped by Huey). Ratchet runs with its guarantees on (fenced writes,
heartbeats, one audit record per attempt) and the settings of ``bench_peers.py``.

Figures, each the median of ``--repeats`` rounds, the systems taking turns at going first:

* processing (jobs/s), rated from outside as ``bench_peers.py`` does (jobs left counted every
  20 ms, start-up not counted);
* on PostgreSQL, transactions per job: the scratch database's ``xact_commit + xact_rollback``
  (``pg_stat_database``) over the whole worker run (start-up, claims, outcome writes,
  heartbeats, shutdown), minus this script's own reads, divided by the jobs. Every hot write of
  Ratchet on PostgreSQL is one statement in autocommit, so for it this is the number of
  statements (round trips) per job; PgQueuer's statements are autocommit too.

``--before DIR`` also runs Ratchet's worker from the source tree ``DIR`` (an extracted commit:
``git archive <commit> | tar -x -C DIR``) in the same rounds, so before and after are compared
under the same load.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_engine
import bench_peers
from bench_engine import RATCHET, REPO, container, load
from bench_peers import RATCHET_WORKER, WorkerRun

QUIET = None if os.environ.get("BENCH_VERBOSE") else subprocess.DEVNULL
"""The workers' stderr (a log line per failed job): shown with ``BENCH_VERBOSE=1``."""

DISTRIBUTIONS = ("ratchet_api", "ratchet_core", "ratchet_store_sql", "ratchet_store_mongo")


class Counted:
    """``remaining()`` of a backlog on a connection of its own, counting its statements."""

    def __init__(self, connect: Callable[[], Any], sql: str) -> None:
        self.conn = connect()
        self.sql = sql
        self.statements = 0

    def __call__(self) -> int:
        self.statements += 1
        return int(self.conn.execute(self.sql).fetchone()[0])

    def close(self) -> None:
        self.conn.close()


def pg_connect(dsn: str) -> Any:
    import psycopg

    return psycopg.connect(dsn, autocommit=True)


def pg_transactions(dsn: str) -> int:
    """The database's committed and rolled back transactions so far, read on a connection of
    its own (its two statements are counted at its exit, so in the next read)."""
    time.sleep(1.2)  # backends report their counts at most once a second (and at exit)
    with pg_connect(dsn) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database"
            " WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


def measured(
    jobs: int,
    spawn: Callable[[], subprocess.Popen[bytes]],
    remaining: Counted,
    exits_by_itself: bool,
    dsn: str | None,
) -> tuple[float, float]:
    """(processing jobs/s, transactions per job or nan)."""
    before = pg_transactions(dsn) if dsn else 0
    try:
        run = WorkerRun(jobs).measure(spawn, remaining, exits_by_itself)
    finally:
        remaining.close()
    if not dsn:
        return run.processing, float("nan")
    spent = pg_transactions(dsn) - before - remaining.statements - 2  # 2: the first read's own
    return run.processing, spent / jobs


# ---------------------------------------------------------------- Ratchet


def ratchet_spawn(url: str, code: Path | None, concurrency: int) -> subprocess.Popen[bytes]:
    values = {"store.url": url, **RATCHET_WORKER}
    command = [RATCHET]
    for key, value in values.items():
        command += ["--set", f"{key}={value}"]
    command += ["worker", "--no-status", "--log-level", "ERROR", "--burst"]
    command += ["-c", str(concurrency), "--prefetch", str(max(concurrency, 64))]
    paths = [str(REPO)]  # benchmarks.outcome_jobs; the code itself from `code` when given
    if code is not None:
        paths += [str(code / d / "src") for d in DISTRIBUTIONS]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    return subprocess.Popen(command, env=env, cwd=tempfile.gettempdir(), stderr=QUIET)


def ratchet_run(
    url: str, jobs: int, percent: int, concurrency: int, code: Path | None
) -> tuple[float, float]:
    from benchmarks import outcome_jobs

    c = container(url, **{"security.allowed_packages": "tests.,benchmarks."})
    c.scheduler().enqueue_many(outcome_jobs.flaky, [(n, percent) for n in range(jobs)])
    c.job_store().close()
    sql = "SELECT count(*) FROM ratchet_jobs WHERE status NOT IN ('SUCCEEDED', 'FAILED')"
    dsn = None
    if url.startswith("sqlite"):
        path = url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE ratchet_jobs SET max_retries = 0")  # dead letter at once
        remaining = Counted(lambda: sqlite3.connect(path), sql)
    else:
        dsn = url.replace("postgresql+psycopg://", "postgresql://")
        with pg_connect(dsn) as conn:
            conn.execute("UPDATE ratchet_jobs SET max_retries = 0")
        remaining = Counted(lambda: pg_connect(dsn), sql)
    try:
        return measured(jobs, lambda: ratchet_spawn(url, code, concurrency), remaining, True, dsn)
    finally:
        bench_peers.empty_ratchet(url)


# ---------------------------------------------------------------- peers


def pgq_run(dsn: str, jobs: int, percent: int, batch_size: int) -> tuple[float, float]:
    async def fill() -> None:
        connection, queries = await bench_peers._pgq_queries(dsn)
        payloads = [b"1" if n % 100 < percent else b"0" for n in range(jobs)]
        await queries.enqueue(["flaky"] * jobs, payloads, [0] * jobs)
        await connection.close()

    asyncio.run(fill())
    python = str(bench_peers.PEERS / "bin" / "python")
    command = [python, "-m", "benchmarks.peer_outcomes_pgq", dsn, str(batch_size)]
    env = dict(os.environ, PYTHONPATH=str(REPO))

    def spawn() -> subprocess.Popen[bytes]:
        return subprocess.Popen(command, env=env, cwd=str(REPO), stderr=QUIET)

    remaining = Counted(lambda: pg_connect(dsn), "SELECT count(*) FROM pgqueuer")
    try:
        return measured(jobs, spawn, remaining, True, dsn)
    finally:
        bench_peers.pgq_empty(dsn)


def huey_run(path: Path, jobs: int, percent: int, workers: int) -> tuple[float, float]:
    os.environ["RATCHET_BENCH_HUEY_FILE"] = str(path)
    sys.modules.pop("benchmarks.peer_outcomes_huey", None)
    module = importlib.import_module("benchmarks.peer_outcomes_huey")
    for n in range(jobs):
        module.flaky(n % 100 < percent)
    command = [str(bench_peers.PEERS / "bin" / "huey_consumer")]
    command += ["benchmarks.peer_outcomes_huey.huey", "-w", str(workers), "-k", "thread", "-q"]
    env = dict(os.environ, PYTHONPATH=str(REPO))

    def spawn() -> subprocess.Popen[bytes]:
        return subprocess.Popen(command, env=env, cwd=str(REPO), stderr=QUIET)

    remaining = Counted(lambda: sqlite3.connect(path), "SELECT count(*) FROM task")
    try:
        return measured(jobs, spawn, remaining, False, None)
    finally:
        module.huey.flush()


# ---------------------------------------------------------------- rounds


def pg_round(args: argparse.Namespace, turn: int) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    with bench_peers.postgres_database() as (url, dsn):
        for percent in (0, args.fail):
            sides = ["after", "PgQueuer"] + (["before"] if args.before else [])
            sides = sides[turn % len(sides) :] + sides[: turn % len(sides)]
            for side in sides:
                if side == "PgQueuer":
                    figures = pgq_run(dsn, args.jobs, percent, args.pgq_batch_size)
                else:
                    code = Path(args.before) if side == "before" else None
                    figures = ratchet_run(url, args.jobs, percent, args.concurrency, code)
                out[f"{percent}% {side}"] = figures
    return out


def sqlite_round(args: argparse.Namespace, turn: int) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    with bench_engine.scratch("sqlite") as url, tempfile.TemporaryDirectory() as tmp:
        for percent in (0, args.fail):
            sides = ["after", "Huey"] + (["before"] if args.before else [])
            sides = sides[turn % len(sides) :] + sides[: turn % len(sides)]
            for side in sides:
                if side == "Huey":
                    path = Path(tmp) / f"huey-{percent}.db"
                    figures = huey_run(path, args.jobs, percent, args.concurrency)
                else:
                    code = Path(args.before) if side == "before" else None
                    figures = ratchet_run(url, args.jobs, percent, args.concurrency, code)
                out[f"{percent}% {side}"] = figures
    return out


def report(backend: str, peer: str, rounds: list[dict[str, tuple[float, float]]]) -> None:
    print(f"\n{backend}: medians of {len(rounds)} round(s) (each round: processing/xacts)")
    print(f"{'run':<16}{'jobs/s':>10}{'xacts/job':>11}{'vs ' + peer:>14}  each round")
    for key in rounds[0]:
        rate = statistics.median(r[key][0] for r in rounds)
        per_job = statistics.median(r[key][1] for r in rounds)
        percent = key.split("%")[0]
        theirs = statistics.median(r[f"{percent}% {peer}"][0] for r in rounds)
        each = ", ".join(f"{r[key][0]:.0f}/{r[key][1]:.2f}" for r in rounds)
        print(f"{key:<16}{rate:>10,.0f}{per_job:>11.2f}{rate / theirs:>14.2f}  {each}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "all"], default="all")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--fail", type=int, default=10, help="percent of jobs that raise")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--pgq-batch-size", type=int, default=10)
    parser.add_argument("--before", help="a source tree to run Ratchet's worker from as well")
    parser.add_argument("--peers", default=str(bench_peers.PEERS))
    args = parser.parse_args(argv)
    bench_peers.use_peers(Path(args.peers).resolve())
    backends = ["postgresql", "sqlite"] if args.backend == "all" else [args.backend]
    print(f"load average before: {load()}; {args.jobs} jobs, {args.repeats} round(s)")
    for backend in backends:
        rounds = []
        for turn in range(args.repeats):
            pick = pg_round if backend == "postgresql" else sqlite_round
            rounds.append(pick(args, turn))
            print(f"  {backend} round {turn + 1} done, load average {load()}", flush=True)
        report(backend, "PgQueuer" if backend == "postgresql" else "Huey", rounds)
    print(f"\nload average after: {load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
