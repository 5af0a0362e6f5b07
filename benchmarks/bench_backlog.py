"""Claims against a big backlog: claim latency p50/p99 and throughput at 10,000 vs 1,000,000
pending jobs on PostgreSQL, with finished history next to them. A benchmark, never a test.

    .venv/bin/python benchmarks/bench_backlog.py                          # 10k vs 1M pending
    .venv/bin/python benchmarks/bench_backlog.py --sizes 10000 200000 --finished 200000

For each size a scratch database is created (dropped at the end) and loaded through the store's
``bulk_insert`` (COPY) with a mixed backlog: priorities spread over -50..50, one of ten tags per
job, execution targets (none, ``gpu``, ``io``), 80 % due (scheduled up to an hour ago) and
20 % scheduled up to a day ahead; plus ``--finished`` SUCCEEDED jobs (the history that
retention has not archived yet). After ``VACUUM ANALYZE`` it runs ``--claims`` rounds of
``claim_next_batch(--batch)`` followed by ``mark_succeeded_many`` of the claimed jobs (a
worker's two statements per batch), timing each claim, and prints:

* claim p50/p99 (ms) and claim+complete throughput (jobs/s, over the timed statements) for an
  unfiltered claim and for a claim restricted to the ``gpu`` target (which also takes jobs
  without a target; the filter is applied while the claim index is read). After each round as
  many new due jobs are inserted as were claimed (not timed), so the backlog keeps its size;
* the plan of the claim (``EXPLAIN``: which index it reads);
* the size of ``ratchet_jobs`` and of its claim index before and after the claims, and the
  dead tuples autovacuum has not yet removed;
* with ``--explain``, ``EXPLAIN (ANALYZE, BUFFERS)`` of the store's own claim statement (its
  effect rolled back).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PG = os.environ.get("RATCHET_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432")
CHUNK = 50_000


def scratch() -> tuple[str, Any]:
    import psycopg

    name = f"ratchet_backlog_{uuid.uuid4().hex[:8]}"
    admin = PG.replace("postgresql+psycopg://", "postgresql://") + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return f"{PG}/{name}", drop


def load(store: Any, pending: int, finished: int, rng: random.Random) -> float:
    """Bulk-insert the backlog and the history; seconds taken."""
    from ratchet_api.model import JobStatus
    from ratchet_api.store import JobEntity

    now = datetime.now(UTC)
    targets = (None, None, "gpu", "io")
    started = time.perf_counter()
    for start in range(0, pending, CHUNK):
        rows = []
        for _ in range(min(CHUNK, pending - start)):
            due = rng.random() < 0.8
            offset = timedelta(seconds=rng.uniform(0, 3600 if due else 86_400))
            rows.append(
                JobEntity(
                    target="tests.engine.targets:noop",
                    priority=rng.randint(-50, 50),
                    tags=(f"tenant-{rng.randrange(10)}",),
                    execution_target=rng.choice(targets),
                    scheduled_at=now - offset if due else now + offset,
                )
            )
        store.bulk_insert(rows)
    for start in range(0, finished, CHUNK):
        rows = []
        for _ in range(min(CHUNK, finished - start)):
            at = now - timedelta(seconds=rng.uniform(0, 6 * 86_400))
            rows.append(
                JobEntity(
                    target="tests.engine.targets:noop",
                    status=JobStatus.SUCCEEDED,
                    scheduled_at=at,
                    created_at=at,
                    started_at=at,
                    finished_at=at,
                    attempt=1,
                    result="null",
                )
            )
        store.bulk_insert(rows)
    return time.perf_counter() - started


def sql(store: Any, text: str) -> list[Any]:
    import sqlalchemy as sa

    with store.engine.connect() as conn:
        autocommit = conn.execution_options(isolation_level="AUTOCOMMIT")  # VACUUM needs it
        result = autocommit.execute(sa.text(text))
        return list(result) if result.returns_rows else []


def sizes(store: Any) -> str:
    (row,) = sql(
        store,
        "SELECT pg_total_relation_size('ratchet_jobs'),"
        " pg_relation_size('ix_ratchet_jobs_claim'),"
        " (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'ratchet_jobs')",
    )
    total, claim_index, dead = row
    return (
        f"ratchet_jobs {total / 2**20:,.0f} MiB, claim index {claim_index / 2**20:,.1f} MiB, "
        f"dead tuples {dead:,}"
    )


def claim_plan(store: Any, targets: list[str] | None) -> str:
    """The claim's plan lines naming how ratchet_jobs is read (the claim's own statement text
    is the store's; this EXPLAINs the equivalent SELECT of its candidate rows)."""
    where = "status = 'PENDING' AND scheduled_at <= timezone('UTC', statement_timestamp())"
    if targets:
        listed = ", ".join(f"'{t}'" for t in targets)
        where += f" AND (execution_target IS NULL OR execution_target IN ({listed}))"
    rows = sql(
        store,
        f"EXPLAIN SELECT id FROM ratchet_jobs WHERE {where}"
        " ORDER BY priority DESC, scheduled_at, id LIMIT 50 FOR UPDATE SKIP LOCKED",
    )
    return " / ".join(r[0].strip() for r in rows if "Scan" in r[0])


def explain_claim(store: Any, batch: int) -> str:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of the store's own claim statement (captured from one
    ``claim_next_batch`` call whose effect is rolled back): the plan and the buffers it hit and
    read, per node."""
    from sqlalchemy import event

    captured: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if "UPDATE" in statement and not captured:
            captured.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", capture)
    try:
        jobs = store.claim_next_batch("bench-explain", batch)
    finally:
        event.remove(store.engine, "before_cursor_execute", capture)
    for job in jobs:  # give the jobs back: the explained run below claims its own
        store.release_claim(job.id, job.claim_seq)
    statement, parameters = captured[0]
    raw = store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters)
        lines = [row[0] for row in cursor.fetchall()]
        raw.rollback()
    finally:
        raw.close()
    return "\n    ".join(lines)


def claims(
    store: Any, rounds: int, batch: int, targets: list[str] | None, rng: random.Random
) -> dict[str, float]:
    """``rounds`` claims of ``batch`` jobs, each followed by its batched success; after each
    round as many new due jobs are inserted as were claimed (not timed), so the backlog keeps
    its size. Claim p50/p99 in ms, and jobs/s over the timed claim+complete statements."""
    from ratchet_api.store import JobEntity
    from ratchet_api.store.entities import Completion

    waits: list[float] = []
    done = 0
    busy = 0.0
    for _ in range(rounds):
        t0 = time.perf_counter()
        jobs = store.claim_next_batch("bench-node", batch, execution_targets=targets)
        t1 = time.perf_counter()
        store.mark_succeeded_many(
            [Completion(job_id=j.id, claim_seq=j.claim_seq, result="null") for j in jobs]
        )
        busy += time.perf_counter() - t0
        waits.append((t1 - t0) * 1000)
        done += len(jobs)
        now = datetime.now(UTC)
        store.bulk_insert(
            [
                JobEntity(
                    target="tests.engine.targets:noop",
                    priority=rng.randint(-50, 50),
                    tags=(f"tenant-{rng.randrange(10)}",),
                    execution_target=j.execution_target,
                    scheduled_at=now - timedelta(seconds=rng.uniform(0, 3600)),
                )
                for j in jobs
            ]
        )
    waits.sort()
    return {
        "p50": statistics.median(waits),
        "p99": waits[min(len(waits) - 1, int(len(waits) * 0.99))],
        "rate": done / busy if busy else 0.0,
        "claimed": float(done),
    }


def run(pending: int, finished: int, rounds: int, batch: int, explain: bool) -> dict[str, Any]:
    from ratchet_store_sql import SqlJobStore, migrate

    url, drop = scratch()
    try:
        migrate(url)
        store = SqlJobStore(url)
        rng = random.Random(pending)
        seconds = load(store, pending, finished, rng)
        sql(store, "VACUUM ANALYZE ratchet_jobs")
        before = sizes(store)
        plan = claim_plan(store, None)
        plan_gpu = claim_plan(store, ["gpu"])
        anywhere = claims(store, rounds, batch, None, rng)
        gpu = claims(store, rounds, batch, ["gpu"], rng)
        after = sizes(store)
        explained = explain_claim(store, batch) if explain else ""
        store.close()
    finally:
        drop()
    return {
        "pending": pending,
        "load": seconds,
        "before": before,
        "after": after,
        "plan": plan,
        "plan_gpu": plan_gpu,
        "any": anywhere,
        "gpu": gpu,
        "explain": explained,
    }


def _interrupt(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # the scratch database is dropped on the way out


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--finished", type=int, default=1_000_000, help="SUCCEEDED history")
    parser.add_argument("--claims", type=int, default=200, help="claim rounds per filter")
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument(
        "--explain", action="store_true", help="EXPLAIN (ANALYZE, BUFFERS) the claim at the end"
    )
    args = parser.parse_args(argv)
    print(f"load {' '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)
    results = []
    for pending in args.sizes:
        result = run(pending, args.finished, args.claims, args.batch, args.explain)
        results.append(result)
        print(
            f"{pending:>10,} pending + {args.finished:,} finished: loaded in "
            f"{result['load']:.0f} s\n  before: {result['before']}\n  after:  {result['after']}"
            f"\n  plan: {result['plan']}\n  plan (gpu): {result['plan_gpu']}"
            + (f"\n  claim: {result['explain']}" if result["explain"] else ""),
            flush=True,
        )
    print(f"\nload {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(
        "| pending | claim p50 ms | claim p99 ms | claim+complete jobs/s |"
        " gpu-only p50 / p99 ms | gpu-only jobs/s |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for r in results:
        a, g = r["any"], r["gpu"]
        print(
            f"| {r['pending']:,} | {a['p50']:.1f} | {a['p99']:.1f} | {a['rate']:,.0f} "
            f"| {g['p50']:.1f} / {g['p99']:.1f} | {g['rate']:,.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
