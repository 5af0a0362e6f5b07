"""``QueueStatsStore.queue_stats`` on PostgreSQL with a big backlog, with and without the
covering partial indexes of migration 0014, and what those indexes cost an enqueue. A
benchmark, never a test.

    .venv/bin/python benchmarks/bench_queue_stats.py                # 100k pending, 1M finished
    .venv/bin/python benchmarks/bench_queue_stats.py --pending 20000 --finished 100000

Loads (through SQL, ``generate_series``) ``--pending`` PENDING jobs (a quarter scheduled an
hour ahead, three execution targets, five priorities, seven job targets), 64 RUNNING and
``--finished`` SUCCEEDED/FAILED jobs with ``--payload``-character payloads into a fresh
database, then ``VACUUM ANALYZE``. Measured, alternating the two index states ``--rounds``
times (interleaved, so both see the same machine load):

* ``queue_stats(finished_since=now - 1 h)``: median of ``--reads`` calls (ms), and the scan
  node of each branch of ``EXPLAIN ANALYZE``;
* enqueue: ``--enqueues`` single ``insert_job`` calls (median ms) and one ``bulk_insert`` of
  ``--bulk`` jobs (jobs/s), rows deleted again after each measure.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import timedelta

import sqlalchemy as sa

from ratchet_api.store import JobEntity
from ratchet_store_sql import SqlJobStore

SERVER = "postgresql+psycopg://postgres@127.0.0.1"
DB = "bench_queue_stats"
INDEXES = {
    "ix_ratchet_jobs_pending_queues": "(execution_target, target, priority, scheduled_at) "
    "WHERE status = 'PENDING'",
    "ix_ratchet_jobs_running_queues": "(execution_target, target, priority) "
    "WHERE status = 'RUNNING'",
}
COLUMNS = """(id, status, priority, job_type, target, payload, scheduled_at, created_at,
  updated_at, started_at, finished_at, attempt, max_retries, claim_seq, execution_target, owner,
  heartbeat_at)"""
NOW = "(now() at time zone 'utc')"


def load(store: SqlJobStore, pending: int, finished: int, payload: int) -> None:
    text = '{"a": "' + "x" * payload + '"}'
    with store.engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE ratchet_jobs CASCADE"))
        conn.execute(
            sa.text(f"""INSERT INTO ratchet_jobs {COLUMNS}
            SELECT gen_random_uuid(), 'PENDING', (i % 5) * 50 - 100, 'STANDARD',
              'app.jobs.t' || (i % 7), :payload,
              {NOW} + ((CASE WHEN i % 4 = 0 THEN 3600 ELSE -i % 600 END) || ' s')::interval,
              {NOW}, {NOW}, NULL, NULL, 0, 3, 0,
              CASE WHEN i % 3 = 0 THEN NULL ELSE 'label' || (i % 3) END, NULL, NULL
            FROM generate_series(1, :n) i"""),
            {"payload": text, "n": pending},
        )
        conn.execute(
            sa.text(f"""INSERT INTO ratchet_jobs {COLUMNS}
            SELECT gen_random_uuid(), 'RUNNING', 0, 'STANDARD', 'app.jobs.t' || (i % 7),
              :payload, {NOW}, {NOW}, {NOW}, {NOW}, NULL, 1, 3, 1, NULL, 'node-1', {NOW}
            FROM generate_series(1, 64) i"""),
            {"payload": text},
        )
        conn.execute(
            sa.text(f"""INSERT INTO ratchet_jobs {COLUMNS}
            SELECT gen_random_uuid(), CASE WHEN i % 10 = 0 THEN 'FAILED' ELSE 'SUCCEEDED' END,
              0, 'STANDARD', 'app.jobs.t' || (i % 7), :payload,
              {NOW} - interval '2 days', {NOW} - interval '2 days', {NOW},
              {NOW} - (i || ' s')::interval, {NOW} - (i || ' s')::interval, 1, 3, 1,
              NULL, 'node-1', {NOW}
            FROM generate_series(1, :n) i"""),
            {"payload": text, "n": finished},
        )


def set_indexes(store: SqlJobStore, present: bool) -> None:
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for name, definition in INDEXES.items():
            if present:
                conn.execute(
                    sa.text(f"CREATE INDEX IF NOT EXISTS {name} ON ratchet_jobs {definition}")
                )
            else:
                conn.execute(sa.text(f"DROP INDEX IF EXISTS {name}"))
        conn.execute(sa.text("VACUUM ANALYZE ratchet_jobs"))


def plan(store: SqlJobStore) -> list[str]:
    statement = store.queue_stats_statement(store.server_now() - timedelta(hours=1))
    sql = str(statement.compile(store.engine, compile_kwargs={"literal_binds": True}))
    with store.engine.connect() as conn:
        lines = [r[0] for r in conn.execute(sa.text("EXPLAIN ANALYZE " + sql))]
    return [line.strip() for line in lines if "Scan" in line and "Subquery" not in line]


def read_ms(store: SqlJobStore, reads: int) -> float:
    times = []
    for _ in range(reads):
        started = time.perf_counter()
        store.queue_stats(store.server_now() - timedelta(hours=1))
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def enqueue(store: SqlJobStore, singles: int, bulk: int) -> tuple[float, float]:
    times = []
    ids = []
    for _ in range(singles):
        job = JobEntity(target="app.jobs.bench")
        started = time.perf_counter()
        store.insert_job(job)
        times.append((time.perf_counter() - started) * 1000)
        ids.append(job.id)
    jobs = [JobEntity(target="app.jobs.bench") for _ in range(bulk)]
    started = time.perf_counter()
    store.bulk_insert(jobs)
    rate = bulk / (time.perf_counter() - started)
    with store.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM ratchet_jobs WHERE target = 'app.jobs.bench'"))
    return statistics.median(times), rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pending", type=int, default=100_000)
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--payload", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reads", type=int, default=5)
    parser.add_argument("--enqueues", type=int, default=500)
    parser.add_argument("--bulk", type=int, default=10_000)
    args = parser.parse_args()
    admin = sa.create_engine(f"{SERVER}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"DROP DATABASE IF EXISTS {DB}"))
        conn.execute(sa.text(f"CREATE DATABASE {DB}"))
    admin.dispose()
    store = SqlJobStore(f"{SERVER}/{DB}", create_schema=True)
    try:
        load(store, args.pending, args.finished, args.payload)
        results: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
        plans: dict[bool, list[str]] = {}
        for _ in range(args.rounds):
            for present in (False, True):
                set_indexes(store, present)
                plans[present] = plan(store)
                ms = read_ms(store, args.reads)
                single, rate = enqueue(store, args.enqueues, args.bulk)
                results[present].append((ms, single, rate))
        print(
            f"{args.pending} pending, {args.finished} finished, payload {args.payload} chars, "
            f"{args.rounds} interleaved rounds (medians)"
        )
        print("| 0014 indexes | queue_stats ms | insert_job ms | bulk_insert jobs/s |")
        print("|---|---|---|---|")
        for present in (False, True):
            rows = results[present]
            print(
                f"| {'with' if present else 'without'} "
                f"| {statistics.median(r[0] for r in rows):.1f} "
                f"| {statistics.median(r[1] for r in rows):.2f} "
                f"| {statistics.median(r[2] for r in rows):,.0f} |"
            )
        for present in (False, True):
            print(f"\nplan {'with' if present else 'without'} the 0014 indexes:")
            for line in plans[present]:
                print("   ", line)
    finally:
        store.close()


if __name__ == "__main__":
    main()
