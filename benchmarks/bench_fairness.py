"""Fairness under load (issue 27): one tenant holds 99 % of the backlog; how long do the
other tenants' jobs wait? A benchmark, never a test.

    .venv/bin/python benchmarks/bench_fairness.py                       # PostgreSQL and SQLite
    .venv/bin/python benchmarks/bench_fairness.py --backends sqlite --backlog 20000
    .venv/bin/python benchmarks/bench_fairness.py --backends mariadb --runs fair

For each backend, in a fresh database, three runs of ``--seconds`` each with one worker
process (``ratchet worker``, ``--concurrency`` slots, default prefetch) running ``tests.engine.targets.noop``:

* ``empty``: no backlog; tenants B, C, D and E enqueue one job each in turn every
  ``--interval`` seconds (through the scheduler, with ``.fairness_key``);
* ``backlog, fair``: the same arrivals behind ``--backlog`` jobs of tenant A (due a minute
  before the run starts, ``.fairness_key("tenant-a")``, bulk-inserted);
* ``backlog, plain``: the same without any fairness key (today's claim order).

The wait of a job is ``started_at - scheduled_at`` as stored (the claim's clock minus the
enqueue's). A job of B..E not started when the run ends counts with the time it has waited so
far (a lower bound: its p99 is then printed with ``>=``). The target: with fairness, the p99
wait of the other tenants stays within 2x of the empty run's.

Besides the wait, each run prints the time to the worker starting the job (``dispatched_at``:
the claim for jobs that start at once, the later started mark for prefetched ones), the
enqueue's own time (``scheduled_at`` to ``enqueue()`` returned) and the worker's claims in the
window (their count and the gaps between their ``started_at`` stamps); ``--prefetch`` sets
``worker.prefetch``.

Then the claim itself, no worker running (``--claims`` claims of ``--claim-limit`` jobs each,
median ms, the two variants interleaved): over ``--backlog`` unkeyed jobs, the plain statement
against the store as shipped (which probes for keyed jobs at most once a second and keeps the
plain statement); over the keyed backlog plus 100 jobs of each other tenant, the plain
statement against the fair one (and, on PostgreSQL, against the portable fair claim of four
statements that its one-statement claim replaces). ``--runs ""`` times the claims alone.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import attrs
import sqlalchemy as sa

from ratchet_api.ids import uuid7
from ratchet_api.store import SchemaManager
from ratchet_store_sql._dialects.base import ReturningClaim
from ratchet_store_sql.schema import jobs

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.engine import targets  # noqa: E402

RATCHET = str(Path(sys.executable).with_name("ratchet"))
PG_SERVER = "postgresql+psycopg://postgres@127.0.0.1"
MARIADB_SERVER = "mysql+pymysql://root@127.0.0.1:3306"
PG_DB = "bench_fairness"
"""The scratch database (PostgreSQL, MariaDB), dropped and created at each backend's start."""
OTHERS = ("tenant-b", "tenant-c", "tenant-d", "tenant-e")


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def fresh_url(backend: str, workdir: Path) -> str:
    if backend == "sqlite":
        path = workdir / "fairness.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        return f"sqlite:///{path}"
    if backend == "mariadb":
        admin = sa.create_engine(f"{MARIADB_SERVER}/test")
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {PG_DB}"))
            conn.execute(sa.text(f"CREATE DATABASE {PG_DB}"))
        admin.dispose()
        return f"{MARIADB_SERVER}/{PG_DB}"
    admin = sa.create_engine(f"{PG_SERVER}/test", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)"))
        conn.execute(sa.text(f"CREATE DATABASE {PG_DB}"))
    admin.dispose()
    return f"{PG_SERVER}/{PG_DB}"


def container(url: str) -> Any:
    from ratchet_core.runtime.container import RatchetContainer

    made = RatchetContainer(overrides={"store.url": url, "security.allowed_packages": "tests."})
    manager = made.job_store().capability(SchemaManager)
    if manager is not None:
        manager.upgrade()
    return made


def worker_process(url: str, concurrency: int, prefetch: int | None) -> subprocess.Popen[bytes]:
    """``ratchet worker`` in a process of its own (producers are other processes too)."""
    values = {
        "store.url": url,
        "security.allowed_packages": "tests.",
        "worker.concurrency": str(concurrency),
    }
    if prefetch is not None:
        values["worker.prefetch"] = str(prefetch)
    command = [RATCHET]
    for key, value in values.items():
        command += ["--set", f"{key}={value}"]
    command += ["worker", "--no-status", "--log-level", "WARNING"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(command, env=env, cwd=tempfile.gettempdir())


def clear_jobs(store: Any) -> None:
    with store.engine.begin() as conn:
        for table in ("ratchet_job_tags", "ratchet_executions", "ratchet_jobs"):
            conn.execute(sa.text(f"DELETE FROM {table}"))


def load_backlog(scheduler: Any, store: Any, count: int, key: str | None) -> None:
    """``count`` noop jobs, due a minute ago, bulk-inserted (copies of one enqueued job)."""
    builder = scheduler.job(targets.noop)
    if key is not None:
        builder = builder.fairness_key(key)
    template = store.find_by_id(builder.enqueue())
    assert template is not None
    due = datetime.now(UTC) - timedelta(minutes=1)
    jobs = [
        attrs.evolve(template, id=uuid7(), scheduled_at=due + timedelta(microseconds=i))
        for i in range(count - 1)
    ]
    for start in range(0, len(jobs), 10_000):
        store.bulk_insert(jobs[start : start + 10_000])
    if store.engine.dialect.name == "postgresql":
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("VACUUM ANALYZE ratchet_jobs"))
    elif store.engine.dialect.name in ("mysql", "mariadb"):
        with store.engine.begin() as conn:
            conn.execute(sa.text("ANALYZE TABLE ratchet_jobs"))


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def run(url: str, args: argparse.Namespace, backlog: int, fair: bool) -> dict[str, Any]:
    c = container(url)
    scheduler, store = c.scheduler(), c.job_store()
    clear_jobs(store)
    if backlog:
        load_backlog(scheduler, store, backlog, "tenant-a" if fair else None)
    worker = worker_process(url, args.concurrency, args.prefetch)
    ids: list[UUID] = []
    committed: dict[UUID, datetime] = {}  # when enqueue() returned: the job visible by then
    stop = threading.Event()

    def arrivals() -> None:
        turn = 0
        next_at = time.monotonic()
        while not stop.is_set():
            builder = scheduler.job(targets.noop)
            if fair:
                builder = builder.fairness_key(OTHERS[turn % len(OTHERS)])
            job_id = builder.enqueue()
            committed[job_id] = datetime.now(UTC)
            ids.append(job_id)
            turn += 1
            next_at += args.interval
            stop.wait(max(0.0, next_at - time.monotonic()))

    time.sleep(3.0)  # the worker process is up and past its first claims
    producer = threading.Thread(target=arrivals, daemon=True)
    window = datetime.now(UTC)
    started = time.monotonic()
    producer.start()
    time.sleep(args.seconds)
    stop.set()
    producer.join()
    time.sleep(args.grace)  # the last arrivals' chance to start
    elapsed = time.monotonic() - started
    end = datetime.now(UTC)
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=60)
    waits: list[float] = []
    runs: list[float] = []  # to the worker starting the job (dispatched_at: claim or later mark)
    enqueues: list[float] = []  # scheduled_at (stamped before the INSERT) to enqueue() returned
    censored: list[float] = []
    not_started = 0
    for job_id in ids:
        job = store.find_by_id(job_id)
        assert job is not None
        enqueues.append((committed[job_id] - job.scheduled_at).total_seconds())
        if job.started_at is None:
            not_started += 1
            censored.append((end - job.scheduled_at).total_seconds())
            waits.append(censored[-1])
        else:
            waits.append((job.started_at - job.scheduled_at).total_seconds())
            if job.dispatched_at is not None:
                runs.append((job.dispatched_at - job.scheduled_at).total_seconds())
    done_a = 0
    if backlog:
        with store.engine.connect() as conn:
            done_a = int(
                conn.execute(
                    sa.text("SELECT count(*) FROM ratchet_jobs WHERE status <> 'PENDING'")
                ).scalar_one()
            ) - (len(ids) - not_started)
    # the worker's claims in the arrivals' window: one started_at per claim statement
    with store.engine.connect() as conn:
        stamps = list(
            conn.execute(
                sa.select(jobs.c.started_at)
                .where(jobs.c.started_at >= window)
                .group_by(jobs.c.started_at)
                .order_by(jobs.c.started_at)
            ).scalars()
        )
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(stamps)]
    store.close()
    p99 = percentile(waits, 99)
    return {
        "jobs": len(ids),
        "not_started": not_started,
        "p50_ms": percentile(waits, 50) * 1000,
        "p99_ms": p99 * 1000,
        "p99_lower_bound": bool(censored) and p99 >= min(censored),
        "claims": len(stamps),
        "gap_p50_ms": percentile(gaps, 50) * 1000 if gaps else float("nan"),
        "gap_p99_ms": percentile(gaps, 99) * 1000 if gaps else float("nan"),
        "enqueue_p50_ms": percentile(enqueues, 50) * 1000,
        "enqueue_p99_ms": percentile(enqueues, 99) * 1000,
        "run_p50_ms": percentile(runs, 50) * 1000 if runs else float("nan"),
        "run_p99_ms": percentile(runs, 99) * 1000 if runs else float("nan"),
        "backlog_jobs_per_s": done_a / elapsed if backlog else 0.0,
    }


def claim_latency(url: str, args: argparse.Namespace) -> dict[str, float]:
    """Median claim ms: plain statement vs the store as shipped (unkeyed backlog), plain vs
    fair (keyed backlog). Claimed jobs go back to PENDING after each claim."""
    c = container(url)
    scheduler, store = c.scheduler(), c.job_store()
    dialect = store._d
    shipped = dialect.fair_claims_needed
    out: dict[str, float] = {}
    for keyed in (False, True):
        clear_jobs(store)
        load_backlog(scheduler, store, args.backlog, "tenant-a" if keyed else None)
        if keyed:
            for key in OTHERS:
                for _ in range(100):
                    scheduler.job(targets.noop).fairness_key(key).enqueue()
        variants = (
            {"plain": lambda conn: False, "fair": lambda conn: True}
            if keyed
            else {"plain": lambda conn: False, "shipped": shipped}
        )
        if keyed and getattr(type(dialect), "fair_claim", None) not in (
            None,
            ReturningClaim.fair_claim,
        ):
            variants["fair, portable (4 statements)"] = lambda conn: True
        samples: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.claims):
            for name, probe in variants.items():
                dialect.fair_claims_needed = probe
                if name.startswith("fair, portable"):
                    dialect.fair_claim = functools.partial(ReturningClaim.fair_claim, dialect)
                else:
                    vars(dialect).pop("fair_claim", None)
                begin = time.perf_counter()
                claimed = store.claim_next_batch("bench-node", args.claim_limit)
                samples[name].append((time.perf_counter() - begin) * 1000)
                for job in claimed:
                    store.release_claim(job.id, job.claim_seq)
        dialect.fair_claims_needed = shipped
        vars(dialect).pop("fair_claim", None)
        for name, values in samples.items():
            out[f"{'keyed' if keyed else 'unkeyed'} {name}"] = statistics.median(values)
    store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="postgresql,sqlite")
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--grace", type=float, default=2.0)
    parser.add_argument("--interval", type=float, default=0.025)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--prefetch", type=int, default=None, help="worker.prefetch (default: the concurrency)"
    )
    parser.add_argument("--claims", type=int, default=30)
    parser.add_argument("--claim-limit", type=int, default=8)
    parser.add_argument("--skip-claims", action="store_true")
    parser.add_argument(
        "--runs", default="fair,plain", help="the runs after the empty one: fair, plain or both"
    )
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench_fairness_"))
    print(f"load average at start: {load_average()}")
    print(
        "| backend | run | other tenants' jobs | not started | p50 wait ms | p99 wait ms "
        "| p99 / empty p99 | tenant A jobs/s | p50 / p99 to start ms | p50 / p99 enqueue ms | claims: n, gap p50 / p99 ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for backend in args.backends.split(","):
        url = fresh_url(backend, workdir)
        results: list[tuple[str, dict[str, Any]]] = []
        empty = run(url, args, 0, True) if args.runs else {"p99_ms": 0.0}
        if args.runs:
            results.append(("empty", empty))
        for name in filter(None, args.runs.split(",")):
            results.append((f"backlog, {name}", run(url, args, args.backlog, name == "fair")))
        for name, r in results:
            bound = ">= " if r["p99_lower_bound"] else ""
            ratio = r["p99_ms"] / empty["p99_ms"] if empty["p99_ms"] else float("nan")
            print(
                f"| {backend} | {name} | {r['jobs']} | {r['not_started']} | {r['p50_ms']:.1f} "
                f"| {bound}{r['p99_ms']:.1f} | {bound}{ratio:.2f}x | "
                f"{r['backlog_jobs_per_s']:.0f} | {r['run_p50_ms']:.1f} / {r['run_p99_ms']:.1f} "
                f"| {r['enqueue_p50_ms']:.1f} / {r['enqueue_p99_ms']:.1f} "
                f"| {r['claims']}, {r['gap_p50_ms']:.1f} / {r['gap_p99_ms']:.1f} |",
                flush=True,
            )
        if not args.skip_claims:
            for name, ms in claim_latency(url, args).items():
                print(f"  claim of {args.claim_limit}, {args.backlog} pending, {name}: {ms:.2f} ms")
        print(f"load average: {load_average()}")


if __name__ == "__main__":
    main()
