"""Ratchet next to its peers in one run: PgQueuer on PostgreSQL, Huey on SQLite (issue 23).

Usage::

    python3 -m venv .venv-peers                                   # once: the peers' own venv
    .venv-peers/bin/pip install -r benchmarks/requirements-bench.txt   # nothing installs at run time
    .venv/bin/python benchmarks/bench_peers.py                    # 10,000 jobs, 3 rounds
    .venv/bin/python benchmarks/bench_peers.py --jobs 2000 --repeats 1 --samples 50   # quick
    .venv/bin/python benchmarks/bench_peers.py --backend sqlite
    .venv/bin/python benchmarks/bench_peers.py --only latency --code ../main   # main's worker

Both systems of a backend run in the same round on the same database server (PostgreSQL: one
scratch database created and dropped by the run, holding both systems' tables; SQLite: two
files in one temporary directory), one worker process each, no-op jobs, each system with its
guarantees on (Ratchet: fenced writes, heartbeats, one audit record per attempt; PgQueuer:
its heartbeats and status log; Huey: what it has). The systems alternate which goes first
from round to round, and each figure is the median of ``--repeats`` rounds.

Figures (the same harness for both sides):

* single enqueue: ``--jobs`` jobs enqueued one call each, jobs/s;
* bulk enqueue: ``--jobs`` jobs in one call, jobs/s (Huey has none);
* processing: ``--jobs`` pending jobs run by one worker process; this process counts the jobs
  left every 20 ms and rates the jobs done between the first count that moved and the last
  one (so start-up is not counted);
* worker start-up: from spawning the worker process to the first finished job of that run;
* worker peak RSS: the worker process's ``VmHWM`` (peak resident set) during that run;
* enqueue-to-start p50: ``--samples`` jobs enqueued one at a time into an idle worker; the
  job writes the wall-clock time it started at into a file; latency = that time minus the
  time just before the enqueue call.

Durability, stated in the output: PostgreSQL runs both sides at the server's settings
(``synchronous_commit`` as configured, ``on`` by default); on SQLite both sides use WAL with
SQLite's default ``synchronous=FULL`` (Ratchet's default, and Huey's when ``fsync`` is not set).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.util
import os
import signal
import site
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_engine
from bench_engine import REPO, container, load, rate, worker_process

from tests.engine import targets

POLL = 0.02
RATCHET_WORKER = {
    "worker.claim_batch_size": "200",
    "worker.completion_batch_size": "1000",
    "worker.audit": "true",
    "security.allowed_packages": "tests.,benchmarks.",
}


PEERS = REPO / ".venv-peers"
"""The peers' own virtual environment (``--peers``): never Ratchet's ``.venv``, where
PgQueuer's ``pydantic-settings`` would make every Ratchet process import pydantic
(dependency-injector imports it when installed: +8 MiB and a slower start for each worker)."""


def use_peers(venv: Path) -> None:
    """Make the peers importable here (after Ratchet's own packages) and point the peer
    workers at ``venv``'s interpreter; exit with the install commands if they are missing."""
    global PEERS
    PEERS = venv
    found = sorted(venv.glob("lib/python*/site-packages"))
    if found:
        site.addsitedir(str(found[0]))
    missing = [m for m in ("pgqueuer", "asyncpg", "huey") if importlib.util.find_spec(m) is None]
    if missing or not (venv / "bin" / "python").exists():
        raise SystemExit(
            f"the peers ({', '.join(missing) or 'their interpreter'}) are missing from {venv}: "
            f"python3 -m venv {venv} && {venv}/bin/pip install -r "
            "benchmarks/requirements-bench.txt (this script installs nothing)"
        )


# ---------------------------------------------------------------- measuring a worker


class WorkerRun:
    """One worker process processing a backlog: start-up, throughput and peak RSS."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.startup = 0.0
        self.processing = 0.0
        self.rss_mib = 0.0

    def measure(
        self,
        spawn: Callable[[], subprocess.Popen[bytes]],
        remaining: Callable[[], int],
        exits_by_itself: bool,
    ) -> WorkerRun:
        """Spawn the worker, poll ``remaining()`` every ``POLL`` s until it is 0, then reap
        the worker (stopping it with SIGINT unless it exits when the queue is empty). The peak
        RSS is the worker's ``VmHWM``, read at each poll: ``ru_maxrss`` would not do, Linux
        carries a forked child's high-water mark (this harness's size) over ``exec``."""
        spawned = time.perf_counter()
        process = spawn()
        first_time = first_left = None
        deadline = spawned + 600
        try:
            while True:
                self.rss_mib = max(self.rss_mib, peak_rss_mib(process.pid))
                left = remaining()
                now = time.perf_counter()
                if first_time is None and left < self.jobs:
                    first_time, first_left = now, left
                if left == 0:
                    break
                if now > deadline or process.poll() is not None:
                    raise RuntimeError(f"worker stopped or stalled with {left} jobs left")
                time.sleep(POLL)
            assert first_time is not None and first_left is not None
            self.startup = first_time - spawned
            self.processing = rate(first_left, now - first_time) if first_left else float("nan")
            if not exits_by_itself:
                time.sleep(0.2)  # the last dequeued jobs finish
                self.rss_mib = max(self.rss_mib, peak_rss_mib(process.pid))
                process.send_signal(signal.SIGINT)
            process.wait(60)
        except BaseException:
            process.kill()
            process.wait(60)
            raise
        return self


def peak_rss_mib(pid: int) -> float:
    """The peak resident set size of the process ``pid`` so far (0 once it has exited)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def wait_for_stamp(path: Path, before: float) -> float:
    """Milliseconds from ``before`` to the start time the job wrote into ``path``."""
    deadline = time.monotonic() + 10
    while True:
        try:
            text = path.read_text(encoding="ascii")
        except FileNotFoundError:
            text = ""
        if text:
            return (float(text) - before) * 1000
        if time.monotonic() > deadline:
            raise RuntimeError("a stamp job did not start within 10 s")
        time.sleep(0.0005)


# ---------------------------------------------------------------- Ratchet


def empty_ratchet(url: str) -> None:
    """Every Ratchet table emptied the way ``pgq_empty`` empties PgQueuer's on PostgreSQL
    (``TRUNCATE``: no dead rows left for the next phase's claims to step over, which a
    ``DELETE`` of the 10,000 processed jobs left in the claim index until autovacuum came);
    ``DELETE`` on SQLite, as Huey's ``flush``."""
    import sqlalchemy as sa

    from ratchet_store_sql.schema import metadata

    engine = sa.create_engine(url)
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            names = ", ".join(table.name for table in metadata.sorted_tables)
            conn.exec_driver_sql(f"TRUNCATE {names}")
        else:
            for table in reversed(metadata.sorted_tables):
                conn.execute(table.delete())
    engine.dispose()


def ratchet_done_counter(url: str) -> tuple[Callable[[], int], Callable[[], None]]:
    """``remaining()`` for a Ratchet backlog (jobs not SUCCEEDED), on a raw connection."""
    sql = "SELECT count(*) FROM ratchet_jobs WHERE status <> 'SUCCEEDED'"
    if url.startswith("sqlite"):
        conn: Any = sqlite3.connect(url.removeprefix("sqlite:///"))
    else:
        import psycopg

        conn = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"))
        conn.autocommit = True
    return (lambda: int(conn.execute(sql).fetchone()[0])), conn.close


def ratchet_enqueue(url: str, jobs: int) -> tuple[float, float]:
    figures = bench_engine.bench_enqueue(url, jobs)
    empty_ratchet(url)
    return figures["enqueue single (jobs/s)"], figures["enqueue bulk (jobs/s)"]


def ratchet_worker(url: str, jobs: int, concurrency: int) -> WorkerRun:
    c = container(url)
    c.scheduler().enqueue_many(targets.noop, [() for _ in range(jobs)])
    c.job_store().close()
    remaining, close = ratchet_done_counter(url)
    try:
        args = ("--burst", "-c", str(concurrency), "--prefetch", str(max(concurrency, 64)))
        run = WorkerRun(jobs).measure(
            lambda: worker_process(url, *args, **RATCHET_WORKER), remaining, True
        )
    finally:
        close()
    empty_ratchet(url)
    return run


def ratchet_latency(url: str, samples: int, directory: Path) -> float:
    from benchmarks import peer_jobs

    c = container(url, **{"security.allowed_packages": "tests.,benchmarks."})
    scheduler = c.scheduler()
    process = worker_process(url, "-c", "4", **RATCHET_WORKER)
    latencies = []
    try:
        time.sleep(3.0)  # started and idle
        for i in range(samples):
            path = directory / f"ratchet-{i}"
            before = time.time()
            scheduler.enqueue(peer_jobs.stamp, str(path))
            latencies.append(wait_for_stamp(path, before))
            time.sleep(0.02)
    finally:
        process.terminate()
        process.wait(30)
        c.cluster_coordinator().close()
        c.job_store().close()
    empty_ratchet(url)
    return statistics.median(latencies)


# ---------------------------------------------------------------- PgQueuer


def pgq_worker_command(dsn: str, mode: str, batch_size: int) -> list[str]:
    python = str(PEERS / "bin" / "python")
    return [python, "-m", "benchmarks.peer_pgqueuer", dsn, mode, str(batch_size)]


def pgq_spawn(dsn: str, mode: str, batch_size: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(pgq_worker_command(dsn, mode, batch_size), env=env, cwd=str(REPO))


async def _pgq_queries(dsn: str) -> Any:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    connection = await asyncpg.connect(dsn)
    return connection, Queries(AsyncpgDriver(connection))


def pgq_install(dsn: str) -> None:
    async def install() -> None:
        connection, queries = await _pgq_queries(dsn)
        await queries.install()
        await connection.close()

    asyncio.run(install())


def pgq_empty(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics")


def pgq_enqueue(dsn: str, jobs: int) -> tuple[float, float]:
    async def run() -> tuple[float, float]:
        connection, queries = await _pgq_queries(dsn)
        await queries.enqueue("noop", None)  # warm up, as Ratchet's side does
        started = time.perf_counter()
        for _ in range(jobs):
            await queries.enqueue("noop", None)
        single = rate(jobs, time.perf_counter() - started)
        started = time.perf_counter()
        await queries.enqueue(["noop"] * jobs, [None] * jobs, [0] * jobs)
        bulk = rate(jobs, time.perf_counter() - started)
        await connection.close()
        return single, bulk

    figures = asyncio.run(run())
    pgq_empty(dsn)
    return figures


def pgq_worker(dsn: str, jobs: int, batch_size: int) -> WorkerRun:
    async def fill() -> None:
        connection, queries = await _pgq_queries(dsn)
        await queries.enqueue(["noop"] * jobs, [None] * jobs, [0] * jobs)
        await connection.close()

    asyncio.run(fill())
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        run = WorkerRun(jobs).measure(
            lambda: pgq_spawn(dsn, "drain", batch_size),
            lambda: int(conn.execute("SELECT count(*) FROM pgqueuer").fetchone()[0]),  # type: ignore[index]
            True,
        )
    pgq_empty(dsn)
    return run


def pgq_latency(dsn: str, samples: int, directory: Path, batch_size: int) -> float:
    async def measure() -> list[float]:
        connection, queries = await _pgq_queries(dsn)
        latencies = []
        for i in range(samples):
            path = directory / f"pgq-{i}"
            before = time.time()
            await queries.enqueue("stamp", str(path).encode())
            latencies.append(await asyncio.to_thread(wait_for_stamp, path, before))
            await asyncio.sleep(0.02)
        await connection.close()
        return latencies

    process = pgq_spawn(dsn, "continuous", batch_size)
    try:
        time.sleep(3.0)  # started and idle
        latencies = asyncio.run(measure())
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)
    pgq_empty(dsn)
    return statistics.median(latencies)


# ---------------------------------------------------------------- Huey


def huey_env(path: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), RATCHET_BENCH_HUEY_FILE=str(path))


def huey_module(path: Path) -> Any:
    """``peer_huey`` bound to the file ``path`` (imported afresh for each file)."""
    os.environ["RATCHET_BENCH_HUEY_FILE"] = str(path)
    sys.modules.pop("benchmarks.peer_huey", None)
    # imported by the name the consumer registers its tasks under, executed afresh
    return importlib.import_module("benchmarks.peer_huey")


def huey_enqueue(path: Path, jobs: int) -> float:
    module = huey_module(path)
    module.noop()  # warm up (connection, tables)
    started = time.perf_counter()
    for _ in range(jobs):
        module.noop()
    single: float = rate(jobs, time.perf_counter() - started)
    module.huey.flush()
    return single


def huey_worker(path: Path, jobs: int, workers: int) -> WorkerRun:
    module = huey_module(path)
    for _ in range(jobs):
        module.noop()
    conn = sqlite3.connect(path)
    command = [
        str(PEERS / "bin" / "huey_consumer"),
        "benchmarks.peer_huey.huey",
        "-w",
        str(workers),
        "-k",
        "thread",
        "-q",
    ]
    try:
        run = WorkerRun(jobs).measure(
            lambda: subprocess.Popen(command, env=huey_env(path), cwd=str(REPO)),
            lambda: int(conn.execute("SELECT count(*) FROM task").fetchone()[0]),
            False,
        )
    finally:
        conn.close()
    module.huey.flush()
    return run


# ---------------------------------------------------------------- rounds and report


@contextlib.contextmanager
def postgres_database() -> Iterator[tuple[str, str]]:
    """One scratch database with Ratchet's schema and PgQueuer's: (Ratchet URL, libpq DSN)."""
    with bench_engine.scratch("postgresql") as url:
        dsn = url.replace("postgresql+psycopg://", "postgresql://")
        pgq_install(dsn)
        yield url, dsn


def pg_round(args: argparse.Namespace, ratchet_first: bool) -> dict[str, tuple[float, float]]:
    with postgres_database() as (url, dsn), tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        out: dict[str, tuple[float, float]] = {}
        order = [0, 1] if ratchet_first else [1, 0]
        enq: list[tuple[float, float]] = [(0.0, 0.0), (0.0, 0.0)]
        run: list[WorkerRun] = [WorkerRun(0), WorkerRun(0)]
        lat = [0.0, 0.0]
        for side in order if "enqueue" in args.only else []:
            enq[side] = (
                ratchet_enqueue(url, args.jobs) if side == 0 else pgq_enqueue(dsn, args.jobs)
            )
        for side in order if "processing" in args.only else []:
            run[side] = (
                ratchet_worker(url, args.jobs, args.concurrency)
                if side == 0
                else pgq_worker(dsn, args.jobs, args.pgq_batch_size)
            )
        for side in order if "latency" in args.only else []:
            lat[side] = (
                ratchet_latency(url, args.samples, directory)
                if side == 0
                else pgq_latency(dsn, args.samples, directory, args.pgq_batch_size)
            )
        out["single enqueue (jobs/s)"] = (enq[0][0], enq[1][0])
        out["bulk enqueue (jobs/s)"] = (enq[0][1], enq[1][1])
        out["processing (jobs/s)"] = (run[0].processing, run[1].processing)
        out["enqueue-to-start p50 (ms)"] = (lat[0], lat[1])
        out["worker peak RSS (MiB)"] = (run[0].rss_mib, run[1].rss_mib)
        out["worker start-up (s)"] = (run[0].startup, run[1].startup)
        return out


def sqlite_round(args: argparse.Namespace, ratchet_first: bool) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    with bench_engine.scratch("sqlite") as url, tempfile.TemporaryDirectory() as tmp:
        huey_file = Path(tmp) / "huey.db"
        order = [0, 1] if ratchet_first else [1, 0]
        single = [0.0, 0.0]
        run: list[WorkerRun] = [WorkerRun(0), WorkerRun(0)]
        for side in order if "enqueue" in args.only else []:
            single[side] = (
                ratchet_enqueue(url, args.jobs)[0]
                if side == 0
                else huey_enqueue(huey_file, args.jobs)
            )
        for side in order if "processing" in args.only else []:
            run[side] = (
                ratchet_worker(url, args.jobs, args.concurrency)
                if side == 0
                else huey_worker(huey_file, args.jobs, args.huey_workers or args.concurrency)
            )
        out["single enqueue (jobs/s)"] = (single[0], single[1])
        out["processing (jobs/s)"] = (run[0].processing, run[1].processing)
        out["worker peak RSS (MiB)"] = (run[0].rss_mib, run[1].rss_mib)
        out["worker start-up (s)"] = (run[0].startup, run[1].startup)
    return out


PHASES = ("enqueue", "processing", "latency")
LOWER_IS_BETTER = ("(ms)", "(MiB)", "(s)")
TARGETS = {
    ("postgresql", "single enqueue (jobs/s)"): ">= 1.0",
    ("postgresql", "bulk enqueue (jobs/s)"): ">= 1.0",
    ("postgresql", "processing (jobs/s)"): ">= 1.5",
    ("postgresql", "enqueue-to-start p50 (ms)"): "<= 1.0",
    ("postgresql", "worker peak RSS (MiB)"): "<= 1.1",
    ("postgresql", "worker start-up (s)"): "<= 1.0",
    ("sqlite", "single enqueue (jobs/s)"): ">= 1.0",
    ("sqlite", "processing (jobs/s)"): ">= 1.5",
}


def report(backend: str, peer: str, rounds: list[dict[str, tuple[float, float]]]) -> None:
    print(f"\n{backend}: Ratchet vs {peer}, medians of {len(rounds)} round(s)")
    print(f"{'metric':<28}{'Ratchet':>12}{peer:>12}{'ratio R/peer':>14}  target  each round")
    for metric in rounds[0]:
        if not any(r[metric][0] or r[metric][1] for r in rounds):
            continue  # a phase left out by --only
        ours = statistics.median(r[metric][0] for r in rounds)
        theirs = statistics.median(r[metric][1] for r in rounds)
        ratio = ours / theirs if theirs else float("nan")
        each = ", ".join(f"{r[metric][0]:.4g}/{r[metric][1]:.4g}" for r in rounds)
        target = TARGETS.get((backend, metric), "")
        print(f"{metric:<28}{ours:>12,.2f}{theirs:>12,.2f}{ratio:>14.2f}  {target:<7} {each}")


def durability(backend: str) -> str:
    if backend == "postgresql":
        import psycopg

        admin = bench_engine.PG.replace("postgresql+psycopg://", "postgresql://") + "/postgres"
        with psycopg.connect(admin, autocommit=True) as conn:
            sync = conn.execute("SHOW synchronous_commit").fetchone()
            fsync = conn.execute("SHOW fsync").fetchone()
            # a one-row insert waits for its commit's WAL flush: this machine's commit
            # latency, which moves every figure (and from day to day)
            conn.execute("CREATE TABLE IF NOT EXISTS ratchet_bench_commit_probe (x int)")
            commits = []
            for _ in range(50):
                started = time.perf_counter()
                conn.execute("INSERT INTO ratchet_bench_commit_probe VALUES (1)")
                commits.append((time.perf_counter() - started) * 1000)
            conn.execute("DROP TABLE ratchet_bench_commit_probe")
        return (
            f"durability: the same server for both (synchronous_commit={sync[0] if sync else '?'}, "
            f"fsync={fsync[0] if fsync else '?'}; a flushed commit takes "
            f"{statistics.median(commits):.3f} ms, median of 50); Ratchet's claims and started "
            "marks commit without waiting for the WAL flush (ratchet_claim_commit=async, its "
            "default), every other write of either side waits for it"
        )
    return (
        "durability: both WAL with synchronous=FULL (Ratchet's default; Huey's when fsync is "
        "unset, as here): every commit is synced"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "all"], default="all")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--samples", type=int, default=100, help="enqueue-to-start samples")
    parser.add_argument("--concurrency", type=int, default=16, help="Ratchet worker -c")
    parser.add_argument("--pgq-batch-size", type=int, default=10, help="PgQueuer --batch-size")
    parser.add_argument("--huey-workers", type=int, default=0, help="Huey -w (default -c)")
    parser.add_argument(
        "--only",
        action="append",
        choices=PHASES,
        help="run only this phase (repeatable; default all: " + ", ".join(PHASES) + ")",
    )
    parser.add_argument(
        "--code",
        help="run Ratchet's worker from this source tree (DIR/<distribution>/src first on its "
        "PYTHONPATH), e.g. main's checkout, to compare two trees against the same peer",
    )
    parser.add_argument(
        "--peers", default=str(PEERS), help="the peers' virtual environment (default .venv-peers)"
    )
    args = parser.parse_args(argv)
    args.only = args.only or list(PHASES)
    if args.code:
        bench_engine.WORKER_CODE = args.code
    use_peers(Path(args.peers).resolve())
    backends = ["postgresql", "sqlite"] if args.backend == "all" else [args.backend]
    code = f"; Ratchet worker from {args.code}" if args.code else ""
    print(f"load average before: {load()}; {args.jobs} jobs, {args.repeats} round(s){code}")
    for backend in backends:
        rounds = []
        for i in range(args.repeats):
            if backend == "postgresql":
                rounds.append(pg_round(args, ratchet_first=i % 2 == 0))
            else:
                rounds.append(sqlite_round(args, ratchet_first=i % 2 == 0))
            print(f"  {backend} round {i + 1} done, load average {load()}", flush=True)
        report(backend, "PgQueuer" if backend == "postgresql" else "Huey", rounds)
        print(durability(backend))
    print(f"\nload average after: {load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
