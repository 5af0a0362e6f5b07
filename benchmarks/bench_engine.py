"""Engine benchmark: enqueue throughput, processing throughput and enqueue-to-start latency.

Usage::

    .venv/bin/python benchmarks/bench_engine.py --backend all
    .venv/bin/python benchmarks/bench_engine.py --backend postgresql --jobs 10000
    .venv/bin/python benchmarks/bench_engine.py --backend postgresql --enqueue-only  # quick

Each backend gets a scratch database (PostgreSQL: a fresh database dropped at the end; SQLite: a
temporary file). Figures:

* enqueue, single: ``scheduler.enqueue(noop)`` one job per call (one transaction each);
* enqueue, bulk: ``scheduler.enqueue_many`` of ``--jobs`` jobs;
* processing: ``--jobs`` pending no-op jobs run by ONE ``ratchet worker --burst`` process at
  concurrency 1 and 16; jobs/s = jobs / (last finished_at - first started_at), so process start
  up is not counted;
* latency: enqueue-to-start (``started_at - created_at``) of single jobs enqueued one at a time
  into an idle worker process, p50/p99, with PostgreSQL LISTEN/NOTIFY wake-ups between the
  processes and without them (polling only; the idle poll interval is printed).

The raw-SQL baseline of ``benchmarks/bench_store.py`` (plain SQL next to the store's own calls,
same tables) runs in the same invocation and is printed in the same table.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.engine import targets  # noqa: E402

RATCHET = str(Path(sys.executable).with_name("ratchet"))
DISTRIBUTIONS = ("ratchet_api", "ratchet_core", "ratchet_store_sql", "ratchet_store_mongo")
WORKER_CODE: str | None = None
"""Another source tree whose distributions :func:`worker_process` runs (``--code``)."""
PG = os.environ.get("RATCHET_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432")


# ---------------------------------------------------------------- scratch databases


def scratch_postgres() -> tuple[str, Any]:
    import psycopg

    name = f"ratchet_bench_{uuid.uuid4().hex[:8]}"
    admin = PG.replace("postgresql+psycopg://", "postgresql://") + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return f"{PG}/{name}", drop


def scratch_sqlite() -> tuple[str, Any]:
    directory = tempfile.mkdtemp(prefix="ratchet-bench-")
    path = Path(directory) / "bench.db"

    def drop() -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        os.rmdir(directory)

    return f"sqlite:///{path}", drop


# ---------------------------------------------------------------- helpers


def container(url: str, **overrides: Any) -> Any:
    from ratchet_core.runtime.container import RatchetContainer

    values = {"store.url": url, "security.allowed_packages": "tests."}
    values.update(overrides)
    return RatchetContainer(overrides=values)


def worker_process(url: str, *args: str, **settings: str) -> subprocess.Popen[bytes]:
    values = {"store.url": url, "security.allowed_packages": "tests.", **settings}
    command = [RATCHET]
    for key, value in values.items():
        command += ["--set", f"{key}={value}"]
    command += ["worker", "--no-status", "--log-level", "WARNING", *args]
    code = [str(Path(WORKER_CODE) / d / "src") for d in DISTRIBUTIONS] if WORKER_CODE else []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*code, str(REPO)]))
    return subprocess.Popen(command, env=env, cwd=tempfile.gettempdir())


def load() -> str:
    """The 1/5/15-minute load averages (``uptime``), to print next to the figures."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


# ---------------------------------------------------------------- phases


def bench_enqueue(url: str, jobs: int) -> dict[str, float]:
    c = container(url)
    scheduler = c.scheduler()
    store = c.job_store()
    scheduler.enqueue(targets.noop)  # warm up (imports, connection)
    started = time.perf_counter()
    for _ in range(jobs):
        scheduler.enqueue(targets.noop)
    single = rate(jobs, time.perf_counter() - started)
    started = time.perf_counter()
    scheduler.enqueue_many(targets.noop, [() for _ in range(jobs)])
    bulk = rate(jobs, time.perf_counter() - started)
    store.close()
    return {"enqueue single (jobs/s)": single, "enqueue bulk (jobs/s)": bulk}


def bench_enqueue_only(backend: str, jobs: int, repeats: int) -> dict[str, str]:
    """The enqueue rows next to the store's own inserts and raw SQL, all in one scratch database
    and interleaved, ``repeats`` rounds (median and best): quick before/after comparisons of the
    enqueue path (``--enqueue-only``). Besides jobs/s (wall clock) each row gives the CPU time
    this process spent per job, which a busy shared machine disturbs much less."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_store

    from ratchet_api.store.entities import JobEntity
    from ratchet_core.runtime.container import RatchetContainer

    singles = max(1, min(jobs // 10, 1000))
    walls: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}

    def measure(key: str, count: int, action: Any) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        action()
        walls.setdefault(key, []).append(rate(count, time.perf_counter() - wall))
        cpus.setdefault(key, []).append((time.process_time() - cpu) / count * 1e6)

    with scratch(backend) as url:
        c = RatchetContainer(overrides={"store.url": url, "security.allowed_packages": "tests."})
        scheduler, store = c.scheduler(), c.job_store()
        engine = store.engine
        scheduler.enqueue(targets.noop)  # warm up (imports, connection, target cache)
        scheduler.enqueue_many(targets.noop, [()])

        def one_round() -> None:
            bench_store.empty(engine)
            rows = bench_store.raw_rows(engine, jobs)

            def raw_bulk() -> None:
                with bench_store.write_conn(engine) as conn:
                    conn.execute(bench_store.RAW_INSERT, rows)
                    conn.commit()

            measure(f"raw SQL executemany {jobs}", jobs, raw_bulk)
            bench_store.empty(engine)
            entities = [JobEntity(target="tests.engine.targets:noop") for _ in range(jobs)]
            measure(f"store bulk_insert {jobs}", jobs, lambda: store.bulk_insert(entities))
            bench_store.empty(engine)
            arguments = [() for _ in range(jobs)]
            measure(
                f"enqueue_many {jobs} (noop)",
                jobs,
                lambda: scheduler.enqueue_many(targets.noop, arguments),
            )
            bench_store.empty(engine)
            numbered = [(n,) for n in range(jobs)]
            measure(
                f"enqueue_many {jobs} (bulk_item(n: int))",
                jobs,
                lambda: scheduler.enqueue_many(targets.bulk_item, numbered),
            )
            bench_store.empty(engine)
            one_by_one = bench_store.due_jobs(singles)
            measure("store insert_job", singles, lambda: [store.insert_job(j) for j in one_by_one])
            bench_store.empty(engine)
            measure(
                "enqueue (single, noop)",
                singles,
                lambda: [scheduler.enqueue(targets.noop) for _ in range(singles)],
            )

        for _ in range(repeats):
            one_round()
        store.close()
    rows_out: dict[str, str] = {}
    for key, values in walls.items():
        rows_out[f"{key}: jobs/s median / best of {repeats}"] = (
            f"{statistics.median(values):,.0f} / {max(values):,.0f}"
        )
        rows_out[f"{key}: client CPU us/job, median"] = f"{statistics.median(cpus[key]):.1f}"
    bulk_store = statistics.median(walls[f"store bulk_insert {jobs}"])
    rows_out["enqueue_many (noop) / store bulk_insert, jobs/s medians"] = (
        f"{statistics.median(walls[f'enqueue_many {jobs} (noop)']) / bulk_store:.2f}"
    )
    return rows_out


def bench_processing(url: str, jobs: int, concurrency: int, audit: bool = True) -> float:
    from ratchet_api.model import JobStatus
    from ratchet_api.store.entities import JobQuery

    c = container(url)
    scheduler, store = c.scheduler(), c.job_store()
    scheduler.enqueue_many(targets.noop, [() for _ in range(jobs)])
    process = worker_process(
        url,
        "--burst",
        "-c",
        str(concurrency),
        "--prefetch",
        str(max(concurrency, 64)),
        **{
            "worker.claim_batch_size": "200",
            "worker.completion_batch_size": "1000",
            "worker.audit": "true" if audit else "false",
        },
    )
    if process.wait(600) != 0:
        raise RuntimeError(f"worker exited with {process.returncode}")
    done = store.search_jobs(JobQuery(limit=10_000, statuses=frozenset({JobStatus.SUCCEEDED})))
    if len(done) != jobs:
        raise RuntimeError(f"only {len(done)} of {jobs} jobs succeeded")
    first = min(j.started_at for j in done if j.started_at is not None)
    last = max(j.finished_at for j in done if j.finished_at is not None)
    store.close()
    return rate(jobs, (last - first).total_seconds())


def bench_latency(
    url: str, samples: int, settings: dict[str, str], pause: float | None = None
) -> tuple[float, float]:
    """Enqueue-to-start of single jobs, enqueued in this process ``pause`` seconds apart, run by
    an idle ``ratchet worker`` process with ``settings`` (the enqueuing side gets the same
    settings)."""
    c = container(url, **settings)
    scheduler, store = c.scheduler(), c.job_store()
    process = worker_process(url, "-c", "4", **settings)
    try:
        time.sleep(3.0)  # started and idle: the poll delay has grown to its maximum
        waking = settings.get("cluster.backend") != "none"
        if pause is None:
            pause = 0.02 if waking else 0.05
        latencies = enqueue_to_start_ms(scheduler, store, samples, pause)
    finally:
        process.terminate()
        process.wait(30)
        c.cluster_coordinator().close()
    store.close()
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return statistics.median(latencies), p99


def enqueue_to_start_ms(scheduler: Any, store: Any, samples: int, pause: float) -> list[float]:
    """Enqueue ``samples`` no-op jobs one at a time into an idle worker; each one's
    ``started_at - created_at`` in milliseconds, sorted."""
    from ratchet_api.model import JobStatus

    latencies: list[float] = []
    for i in range(samples):
        job_id = scheduler.enqueue(targets.noop)
        deadline = time.monotonic() + 10
        while True:
            job = store.find_by_id(job_id)
            if job is not None and job.status is JobStatus.SUCCEEDED:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"job {i} did not run within 10 s")
            time.sleep(0.001)
        assert job.started_at is not None
        latencies.append((job.started_at - job.created_at).total_seconds() * 1000)
        time.sleep(pause)
    return sorted(latencies)


def run_store_baseline(backend: str, jobs: int) -> dict[str, float]:
    """``bench_store.py``'s measurements (raw SQL next to the store) in this same run."""
    path = REPO / "benchmarks" / "bench_store.py"
    spec = importlib.util.spec_from_file_location("bench_store", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    figures: dict[str, float] = module.bench(backend, jobs, 100, 1000)
    return {
        "raw SQL single insert": figures["raw single insert/s"],
        "store insert_job": figures["ratchet single insert/s"],
        f"raw SQL bulk insert {jobs}": jobs / figures["raw bulk insert s"],
        f"store bulk_insert {jobs}": jobs / figures["ratchet bulk insert s"],
        "raw SQL claim+complete (batches of 100)": figures["raw claim+complete/s"],
        "store claim+complete (batches of 100)": figures["ratchet claim+complete/s"],
    }


# ---------------------------------------------------------------- driver


@contextlib.contextmanager
def scratch(backend: str) -> Iterator[str]:
    """A migrated, empty database for one phase."""
    url, drop = scratch_postgres() if backend == "postgresql" else scratch_sqlite()
    try:
        from ratchet_api.store.protocols import SchemaManager

        store = container(url).job_store()
        manager = store.capability(SchemaManager)
        if manager is not None:
            manager.upgrade()
        store.close()
        yield url
    finally:
        drop()


TARGETS = {
    "enqueue single (jobs/s)": ">= 2,500 (pg)",
    "enqueue bulk (jobs/s)": ">= 30,000 (pg)",
    "processing c=1 (jobs/s)": ">= 5,000 pg, 2,000 sqlite",
    "processing c=16 (jobs/s)": ">= 5,000 pg, 2,000 sqlite",
    "latency p50/p99 ms (LISTEN/NOTIFY)": "p50 <= 5 ms",
}


def bench_backend(backend: str, jobs: int, samples: int) -> dict[str, str]:
    rows: dict[str, str] = {}
    print(f"[{backend}] enqueue ...", flush=True)
    with scratch(backend) as url:
        for key, value in bench_enqueue(url, jobs).items():
            rows[key] = f"{value:,.0f}"
    for concurrency in (1, 16):
        print(f"[{backend}] processing at concurrency {concurrency} ...", flush=True)
        with scratch(backend) as url:
            rows[f"processing c={concurrency} (jobs/s)"] = (
                f"{bench_processing(url, jobs, concurrency):,.0f}"
            )
    print(f"[{backend}] processing at concurrency 16 without audit records ...", flush=True)
    with scratch(backend) as url:
        rows["processing c=16, worker.audit=false (jobs/s)"] = (
            f"{bench_processing(url, jobs, 16, audit=False):,.0f}"
        )
    rows.update(bench_latency_rows(backend, jobs, samples))
    print(f"[{backend}] raw-SQL baseline (bench_store.py) ...", flush=True)
    for key, value in run_store_baseline(backend, jobs).items():
        rows[f"baseline: {key} (jobs/s)"] = f"{value:,.0f}"
    return rows


def bench_latency_rows(backend: str, _jobs: int, samples: int) -> dict[str, str]:
    rows: dict[str, str] = {}
    modes = {
        # the defaults: PostgreSQL's insert trigger NOTIFY, SQLite's file watch
        "cluster.backend=auto (defaults)": {},
        "polling only, cluster.backend=none, adaptive 50 ms .. 1 s": {"cluster.backend": "none"},
    }
    if backend == "postgresql":
        modes["LISTEN/NOTIFY"] = {"cluster.backend": "postgres", "cluster.channel": "ratchet_bench"}
    for label, settings in modes.items():
        print(f"[{backend}] latency ({label}) ...", flush=True)
        with scratch(backend) as url:
            p50, p99 = bench_latency(url, samples, settings)
        rows[f"latency p50/p99 ms ({label})"] = f"{p50:.1f} / {p99:.1f}"
    # sporadic jobs: the poll delay of an idle worker has grown to its maximum between them
    for label, settings in {"auto": {}, "none": {"cluster.backend": "none"}}.items():
        print(f"[{backend}] latency of sporadic jobs (cluster.backend={label}) ...", flush=True)
        with scratch(backend) as url:
            p50, worst = bench_latency(url, 15, settings, pause=1.2)
        rows[f"latency p50/p99 ms, 15 jobs 1.2 s apart (cluster.backend={label})"] = (
            f"{p50:.1f} / {worst:.1f}"
        )
    return rows


def bench_processing_rows(backend: str, jobs: int, _samples: int) -> dict[str, str]:
    rows: dict[str, str] = {}
    for concurrency in (1, 16):
        print(f"[{backend}] processing at concurrency {concurrency} ...", flush=True)
        with scratch(backend) as url:
            rows[f"processing c={concurrency} (jobs/s)"] = (
                f"{bench_processing(url, jobs, concurrency):,.0f}"
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "all"], default="all")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--latency-samples", type=int, default=200)
    parser.add_argument(
        "--processing-only",
        action="store_true",
        help="Only the processing rows (worker changes: before/after comparisons).",
    )
    parser.add_argument(
        "--enqueue-only",
        action="store_true",
        help="Only enqueue_many/enqueue next to the store's bulk_insert/insert_job and raw SQL, "
        "interleaved in one database, --repeats times (enqueue path: before/after comparisons).",
    )
    parser.add_argument(
        "--latency-only",
        action="store_true",
        help="Only the enqueue-to-start latency rows (wake-up changes: before/after).",
    )
    parser.add_argument("--repeats", type=int, default=5, help="rounds of --enqueue-only")
    args = parser.parse_args(argv)
    backends = ["sqlite", "postgresql"] if args.backend == "all" else [args.backend]
    if args.enqueue_only:
        results = {b: bench_enqueue_only(b, args.jobs, args.repeats) for b in backends}
    else:
        bench = bench_backend
        if args.processing_only:
            bench = bench_processing_rows
        elif args.latency_only:
            bench = bench_latency_rows
        results = {b: bench(b, args.jobs, args.latency_samples) for b in backends}
    keys = list(dict.fromkeys(k for rows in results.values() for k in rows))
    width = max(len(k) for k in keys)
    target_width = max(len(v) for v in TARGETS.values())
    print()
    if args.enqueue_only:
        print(f"jobs={args.jobs}, --enqueue-only, {args.repeats} interleaved rounds, load {load()}")
    elif args.latency_only:
        print(
            f"{args.latency_samples} single jobs enqueued 20 ms apart (50 ms when polling only) "
            f"into an idle `ratchet worker -c 4` process, load {load()}"
        )
    else:
        print(
            f"jobs={args.jobs}, processing: one `ratchet worker --burst` process, prefetch "
            "max(c, 64), claim batch 200, completion batch 1000, audit records on unless stated"
        )
    header = f"{'metric':<{width}}  {'target':<{target_width}}  " + "  ".join(
        f"{b:>14}" for b in backends
    )
    print(header)
    print("-" * len(header))
    for key in keys:
        print(
            f"{key:<{width}}  {TARGETS.get(key, ''):<{target_width}}  "
            + "  ".join(f"{results[b].get(key, '-'):>14}" for b in backends)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
