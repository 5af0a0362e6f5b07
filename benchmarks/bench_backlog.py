"""Claims against a big backlog and a long history on PostgreSQL: claim latency p50/p99 and
throughput at 10,000 vs 1,000,000 pending jobs next to millions of finished rows, the plan of
each claim filter, and table/index bloat after processing jobs with retention on. A benchmark,
never a test.

    .venv/bin/python benchmarks/bench_backlog.py                  # 10k vs 1M pending, 10M finished
    .venv/bin/python benchmarks/bench_backlog.py --sizes 10000 100000 --finished 200000 \
        --process 20000                                           # a quick run
    .venv/bin/python benchmarks/bench_backlog.py --finished 20000 --process 0 \
        --claim-ordered                                           # heap in claim order

Loading goes through SQL, not the API: one template row per table is written by the store, then
``INSERT ... SELECT`` over ``generate_series`` copies it with the varying columns computed in
the database (priorities -50..50, one of ten tags, execution targets none / ``gpu`` / ``io``,
80 % due within the last hour and 20 % scheduled up to a day ahead). The finished rows are half
archived jobs (finished over the last ``--days`` days, each in its daily partition) and half
their execution records. The largest size gets ``--finished`` rows, a smaller one as many
finished rows as pending ones. Both databases are loaded first, then ``VACUUM ANALYZE``.

Measured, per size:

* claim p50/p99 (ms) and claim+complete throughput (jobs/s over the timed statements) of
  ``claim_next_batch(--batch)`` + ``mark_succeeded_many``, unfiltered and restricted to the
  ``gpu`` target, in ``--rounds`` alternations between the sizes (interleaved, so both see the
  same machine load); after each claim as many new due jobs are inserted (not timed);
* ``EXPLAIN (ANALYZE, BUFFERS)`` of the store's own claim statement for each claim filter (no
  filter, an execution target, a required tag, an excluded tag; effect rolled back): the scan
  nodes and the indexes they read;
* with ``--process N`` on the largest size: N jobs claimed and completed in batches with a
  retention sweep (succeeded jobs archived at once, archive horizon ``--horizon`` days) every
  ``--sweep-every`` jobs, new jobs inserted to keep the backlog; then the sizes, dead tuples,
  autovacuum runs of the tables and ``pgstattuple`` / ``pgstatindex`` figures where the
  extension is available, and what the sweeps dropped as whole partitions.
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


def sql(store: Any, text: str, **params: Any) -> list[Any]:
    import sqlalchemy as sa

    with store.engine.connect() as conn:
        autocommit = conn.execution_options(isolation_level="AUTOCOMMIT")  # VACUUM needs it
        result = autocommit.execute(sa.text(text), params)
        return list(result) if result.returns_rows else []


def _copy_of(table: Any, template_id: uuid.UUID, overrides: dict[str, str], count: int) -> str:
    """``INSERT ... SELECT`` of ``count`` copies of the template row of ``table``, the
    ``overrides`` columns computed per row (``g`` is the series number)."""
    columns = [c.name for c in table.columns]
    values = ", ".join(overrides.get(c, f"t.{c}") for c in columns)
    return (
        f"INSERT INTO {table.name} ({', '.join(columns)}) SELECT {values}"
        f" FROM generate_series(1, {count}) AS g, {table.name} AS t WHERE t.id = '{template_id}'"
    )


def load(
    store: Any, pending: int, finished: int, days: int, claim_ordered: bool = False
) -> dict[str, float]:
    """Load the backlog and the history through SQL; seconds per part. ``claim_ordered``: the
    job table is rewritten in claim order (``CLUSTER``), as if the jobs had been enqueued in
    the order they are claimed; the ids stay random."""
    from ratchet_api.model import JobStatus
    from ratchet_api.store import JobEntity
    from ratchet_api.store.entities import ExecutionRecord
    from ratchet_store_sql import schema as s

    now = store.server_now()
    template = JobEntity(target="tests.engine.targets:noop", scheduled_at=now, tags=("tenant-0",))
    done = JobEntity(
        target="tests.engine.targets:noop",
        status=JobStatus.SUCCEEDED,
        scheduled_at=now,
        started_at=now,
        finished_at=now,
        attempt=1,
        result="null",
    )
    store.bulk_insert([template, done])
    assert store.archive_job(done.id)
    record = ExecutionRecord(
        job_id=done.id, attempt=1, node_id="bench", status=JobStatus.SUCCEEDED, started_at=now
    )
    store.save_execution(record)
    store.ensure_history_partitions(now - timedelta(days=days), now)
    seconds: dict[str, float] = {}

    started = time.perf_counter()
    due = "timezone('UTC', now()) - random() * interval '1 hour'"
    ahead = "timezone('UTC', now()) + random() * interval '1 day'"
    sql(
        store,
        _copy_of(
            s.jobs,
            template.id,
            {
                "id": "gen_random_uuid()",
                "priority": "(g::bigint * 7919 % 101)::int - 50",
                "execution_target": "(ARRAY[NULL, NULL, 'gpu', 'io'])[g % 4 + 1]",
                "scheduled_at": f"CASE WHEN g % 5 = 0 THEN {ahead} ELSE {due} END",
                "created_at": "timezone('UTC', now())",
                "updated_at": "timezone('UTC', now())",
            },
            pending,
        ),
    )
    sql(
        store,
        f"INSERT INTO {s.job_tags.name} (job_id, tag) SELECT id, 'tenant-' || (abs(hashtext(id::text)) % 10)"
        f" FROM {s.jobs.name} WHERE id <> :t",
        t=template.id,
    )
    seconds["pending"] = time.perf_counter() - started

    started = time.perf_counter()
    archived = finished // 2
    when = f"timezone('UTC', now()) - random() * interval '{days} days'"
    sql(
        store,
        _copy_of(
            s.archived_jobs,
            done.id,
            {
                "id": "gen_random_uuid()",
                "scheduled_at": when,
                "created_at": when,
                "started_at": when,
                "finished_at": when,
                "archived_at": "timezone('UTC', now())",
            },
            archived,
        ),
    )
    seconds["archived"] = time.perf_counter() - started
    started = time.perf_counter()
    columns = [c.name for c in s.executions.columns]
    computed = {
        "id": "gen_random_uuid()",
        "job_id": "a.id",
        "started_at": "a.finished_at - interval '1 second'",
        "finished_at": "a.finished_at",
        "duration_ms": "1000",
    }
    sql(
        store,
        f"INSERT INTO {s.executions.name} ({', '.join(columns)})"
        f" SELECT {', '.join(computed.get(c, f'e.{c}') for c in columns)}"
        f" FROM {s.archived_jobs.name} a, {s.executions.name} e"
        f" WHERE e.id = :r AND a.id <> :d LIMIT {finished - archived}",
        r=record.id,
        d=done.id,
    )
    seconds["executions"] = time.perf_counter() - started
    if claim_ordered:
        started = time.perf_counter()
        order = "priority DESC, scheduled_at, id"
        sql(store, f"CREATE INDEX bench_claim_order ON {s.jobs.name} ({order})")
        sql(store, f"CLUSTER {s.jobs.name} USING bench_claim_order")
        sql(store, "DROP INDEX bench_claim_order")
        seconds["cluster"] = time.perf_counter() - started
    started = time.perf_counter()
    sql(store, "VACUUM ANALYZE")
    seconds["vacuum"] = time.perf_counter() - started
    started = time.perf_counter()
    sql(store, "CHECKPOINT")  # the load's dirty pages written now, not during the claims
    seconds["checkpoint"] = time.perf_counter() - started
    return seconds


def sizes(store: Any) -> dict[str, Any]:
    (row,) = sql(
        store,
        "SELECT pg_total_relation_size('ratchet_jobs'), pg_relation_size('ratchet_jobs'),"
        " pg_relation_size('ix_ratchet_jobs_claim'), pg_relation_size('pk_ratchet_jobs'),"
        " n_dead_tup, n_live_tup, autovacuum_count, autoanalyze_count"
        " FROM pg_stat_user_tables WHERE relname = 'ratchet_jobs'",
    )
    keys = ("total", "heap", "claim_index", "pk", "dead", "live", "autovacuums", "autoanalyzes")
    return dict(zip(keys, row, strict=True))


def captured(store: Any, call: Any) -> tuple[tuple[str, Any] | None, Any]:
    """The first UPDATE statement (and its parameters) that ``call()`` sends through
    ``store.engine`` (None if it sent none), and ``call()``'s result."""
    from sqlalchemy import event

    seen: list[tuple[str, Any]] = []

    def listen(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if "UPDATE" in statement and not seen:
            seen.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", listen)
    try:
        result = call()
    finally:
        event.remove(store.engine, "before_cursor_execute", listen)
    return (seen[0] if seen else None), result


def explain_claim(store: Any, batch: int, targets: list[str] | None, tags: Any) -> str:
    """The scan nodes of ``EXPLAIN (ANALYZE, BUFFERS)`` of the store's own claim statement
    (captured from one ``claim_next_batch`` call whose jobs are given back; the explained run
    is rolled back)."""
    seen, jobs = captured(
        store,
        lambda: store.claim_next_batch(
            "bench-explain", batch, execution_targets=targets, tag_filter=tags
        ),
    )
    for job in jobs:
        store.release_claim(job.id, job.claim_seq)
    if seen is None:
        return "(statement not captured)"
    statement, parameters = seen
    raw = store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters)
        lines = [row[0] for row in cursor.fetchall()]
        raw.rollback()
    finally:
        raw.close()
    totals = next((ln.strip() for ln in lines if "Buffers:" in ln), "")
    keep = [ln.strip() for ln in lines if "Scan" in ln or "Execution Time" in ln] + [totals]
    return "\n      ".join(keep)


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


def drop_history(store: Any, horizon: int, batches: int) -> dict[str, float]:
    """The history past ``horizon`` days leaves: first ``batches`` batches of 5,000 archived
    jobs by ``delete_archived_before`` (rows, for comparison), then the rest by dropping daily
    partitions (``maintain_history``). Jobs/s of each."""
    from ratchet_core.features.retention import align_down

    now = store.server_now()
    cutoff = align_down(now - timedelta(days=horizon), timedelta(days=1))
    t0 = time.perf_counter()
    deleted = sum(store.delete_archived_before(cutoff, 5_000) for _ in range(batches))
    t1 = time.perf_counter()
    before = len(store.history_partitions("ratchet_archived_jobs"))
    dropped = store.maintain_history(cutoff, now)
    t2 = time.perf_counter()
    return {
        "deleted": deleted,
        "delete_rate": deleted / (t1 - t0) if deleted else 0.0,
        "dropped": dropped,
        "drop_seconds": t2 - t1,
        "drop_rate": dropped / (t2 - t1) if dropped else 0.0,
        "partitions": before - len(store.history_partitions("ratchet_archived_jobs")),
    }


def process(
    store: Any, total: int, batch: int, every: int, horizon: int, vacuum_every: int
) -> dict[str, Any]:
    """Claim and complete ``total`` jobs, refilling the backlog, with a retention sweep that
    archives succeeded jobs at once and drops history past ``horizon`` days every ``every``
    jobs, and a plain ``VACUUM`` of the hot tables every ``vacuum_every`` jobs (0: never; it
    stands in for autovacuum on a server that has it off). Returns rates and sweep figures."""
    from ratchet_api.store import JobEntity
    from ratchet_api.store.entities import Completion
    from ratchet_core.features.retention import Retention, RetentionPolicy

    rng = random.Random(7)
    policy = RetentionPolicy(
        succeeded=timedelta(0),
        failed=timedelta(0),
        cancelled=timedelta(0),
        archive=timedelta(days=horizon),
        batch_size=5_000,
    )
    retention = Retention(store, policy)
    partitions_before = len(store.history_partitions("ratchet_archived_jobs"))
    done = 0
    busy = 0.0
    sweeping = 0.0
    archived = dropped = 0
    since_sweep = since_vacuum = 0
    vacuuming = 0.0
    vacuums = 0
    started = time.perf_counter()
    while done < total:
        t0 = time.perf_counter()
        jobs = store.claim_next_batch("bench-node", batch)
        store.mark_succeeded_many(
            [Completion(job_id=j.id, claim_seq=j.claim_seq, result="null") for j in jobs]
        )
        busy += time.perf_counter() - t0
        done += len(jobs)
        since_sweep += len(jobs)
        since_vacuum += len(jobs)
        if vacuum_every and since_vacuum >= vacuum_every:
            since_vacuum = 0
            t0 = time.perf_counter()
            sql(store, "VACUUM ratchet_jobs, ratchet_job_tags")
            vacuuming += time.perf_counter() - t0
            vacuums += 1
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
        if since_sweep >= every or done >= total:
            since_sweep = 0
            t0 = time.perf_counter()
            report = retention.sweep()
            sweeping += time.perf_counter() - t0
            archived += sum(report.archived.values())
            dropped += report.archive_deleted
    wall = time.perf_counter() - started
    return {
        "processed": done,
        "rate": done / busy if busy else 0.0,
        "wall_rate": done / wall,
        "sweeping": sweeping,
        "vacuuming": vacuuming,
        "vacuums": vacuums,
        "archived": archived,
        "dropped": dropped,
        "partitions_dropped": partitions_before
        - len(store.history_partitions("ratchet_archived_jobs")),
    }


def bloat(store: Any) -> list[str]:
    """Dead tuples and autovacuum runs of the hot tables, and pgstattuple figures."""
    lines = []
    for row in sql(
        store,
        "SELECT relname, n_live_tup, n_dead_tup, autovacuum_count, vacuum_count,"
        " pg_size_pretty(pg_total_relation_size(relid))"
        " FROM pg_stat_user_tables WHERE relname IN"
        " ('ratchet_jobs', 'ratchet_job_tags', 'ratchet_archived_jobs_default',"
        "  'ratchet_executions_default') ORDER BY relname",
    ):
        lines.append(f"| {row[0]} | {row[1]:,} | {row[2]:,} | {row[3]} | {row[4]} | {row[5]} |")
    try:
        sql(store, "CREATE EXTENSION IF NOT EXISTS pgstattuple")
        (heap,) = sql(
            store,
            "SELECT table_len, tuple_percent, dead_tuple_percent, free_percent"
            " FROM pgstattuple('ratchet_jobs')",
        )
        lines.append(
            f"pgstattuple(ratchet_jobs): {heap[0] / 2**20:,.0f} MiB, live {heap[1]:.1f} %,"
            f" dead {heap[2]:.1f} %, free {heap[3]:.1f} %"
        )
        for index in (
            "ix_ratchet_jobs_claim",
            "pk_ratchet_jobs",
            "ix_ratchet_jobs_status_finished_at",
        ):
            (ix,) = sql(
                store,
                f"SELECT index_size, avg_leaf_density, leaf_fragmentation FROM pgstatindex('{index}')",
            )
            lines.append(
                f"pgstatindex({index}): {ix[0] / 2**20:,.1f} MiB, leaf density {ix[1]:.1f} %,"
                f" fragmentation {ix[2]:.1f} %"
            )
    except Exception as exc:
        lines.append(f"pgstattuple not available: {exc}")
    return lines


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f}"


def _interrupt(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # the scratch databases are dropped on the way out


def main(argv: list[str] | None = None) -> int:
    from ratchet_api.model import NodeTagFilter
    from ratchet_store_sql import SqlJobStore, migrate

    signal.signal(signal.SIGTERM, _interrupt)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--finished", type=int, default=10_000_000, help="rows for the largest")
    parser.add_argument("--days", type=int, default=60, help="the history spans this many days")
    parser.add_argument("--rounds", type=int, default=4, help="alternations between the sizes")
    parser.add_argument("--claims", type=int, default=100, help="claims per filter and round")
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument(
        "--claim-ordered",
        action="store_true",
        help="rewrite the loaded job tables in claim order (CLUSTER), ids still random",
    )
    parser.add_argument("--process", type=int, default=1_000_000, help="jobs processed (0: none)")
    parser.add_argument("--sweep-every", type=int, default=50_000)
    parser.add_argument("--horizon", type=int, default=30, help="retention.archive in days")
    parser.add_argument(
        "--vacuum-every", type=int, default=0, help="VACUUM the hot tables every N jobs (0: never)"
    )
    args = parser.parse_args(argv)
    print(f"load {' '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)
    largest = max(args.sizes)
    drops = []
    stores = {}
    try:
        for pending in args.sizes:
            url, drop = scratch()
            drops.append(drop)
            migrate(url)
            store = SqlJobStore(url)
            stores[pending] = store
            finished = args.finished if pending == largest else pending
            seconds = load(store, pending, finished, args.days, args.claim_ordered)
            print(
                f"{pending:,} pending + {finished:,} finished loaded: "
                + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items())
                + f"\n  ratchet_jobs: {sizes(store)}",
                flush=True,
            )
        filters = {
            "none": (None, None),
            "target gpu": (["gpu"], None),
            "tag required": (None, NodeTagFilter(required=frozenset({"tenant-3"}))),
            "tag excluded": (None, NodeTagFilter(excluded=frozenset({"tenant-3"}))),
        }
        for pending, store in stores.items():
            for name, (targets, tags) in filters.items():
                print(
                    f"  plan {pending:,} / {name}:\n      {explain_claim(store, args.batch, targets, tags)}",
                    flush=True,
                )
        results: dict[int, dict[str, list[dict[str, float]]]] = {
            p: {"any": [], "gpu": []} for p in stores
        }
        rng = random.Random(1)
        for _ in range(args.rounds):
            for pending, store in stores.items():
                results[pending]["any"].append(claims(store, args.claims, args.batch, None, rng))
                results[pending]["gpu"].append(claims(store, args.claims, args.batch, ["gpu"], rng))
        print(f"\nload {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
        if args.rounds:
            print(
                "| pending | finished | claim p50 ms | claim p99 ms | claim+complete jobs/s |"
                " `gpu` p50 / p99 ms | `gpu` jobs/s |\n|---:|---:|---:|---:|---:|---:|---:|"
            )
        for pending, by in results.items() if args.rounds else ():
            a = _merge(by["any"])
            g = _merge(by["gpu"])
            finished = args.finished if pending == largest else pending
            print(
                f"| {pending:,} | {finished:,} | {a['p50']:.1f} | {a['p99']:.1f} | {a['rate']:,.0f} "
                f"| {g['p50']:.1f} / {g['p99']:.1f} | {g['rate']:,.0f} |"
            )
        if args.process:
            store = stores[largest]
            gone = drop_history(store, args.horizon, 4)
            print(
                f"\nhistory past {args.horizon} days: {gone['deleted']:,} archived jobs deleted by"
                f" rows at {gone['delete_rate']:,.0f} jobs/s, then {gone['dropped']:,} archived jobs"
                f" (and their execution records) in {gone['partitions']} daily partitions dropped in"
                f" {gone['drop_seconds']:.1f} s ({gone['drop_rate']:,.0f} jobs/s)",
                flush=True,
            )
            before = sizes(store)
            (autovacuum,) = sql(store, "SHOW autovacuum")[0]
            figures = process(
                store, args.process, 100, args.sweep_every, args.horizon, args.vacuum_every
            )
            after = sizes(store)
            print(
                f"\nprocessed {figures['processed']:,} jobs at {largest:,} pending: "
                f"{figures['rate']:,.0f} jobs/s over claim+complete, {figures['wall_rate']:,.0f} "
                f"jobs/s wall (with refills and sweeps); sweeps {figures['sweeping']:.0f} s, "
                f"archived {figures['archived']:,}, deleted {figures['dropped']:,} archived jobs "
                f"({figures['partitions_dropped']} daily partitions dropped); server autovacuum "
                f"{autovacuum}, {figures['vacuums']} VACUUMs by the benchmark in "
                f"{figures['vacuuming']:.0f} s"
            )
            print(
                f"ratchet_jobs before / after: total {_mib(before['total'])} / {_mib(after['total'])} MiB,"
                f" heap {_mib(before['heap'])} / {_mib(after['heap'])} MiB, claim index"
                f" {_mib(before['claim_index'])} / {_mib(after['claim_index'])} MiB, pk"
                f" {_mib(before['pk'])} / {_mib(after['pk'])} MiB, dead tuples {before['dead']:,} / {after['dead']:,},"
                f" autovacuums {before['autovacuums']} / {after['autovacuums']}"
            )
            print(
                "| table | live | dead | autovacuums | vacuums | size |\n|---|---:|---:|---:|---:|---:|"
            )
            print("\n".join(bloat(store)))
            t0 = time.perf_counter()
            sql(store, "VACUUM ratchet_jobs, ratchet_job_tags")
            print(
                f"VACUUM of ratchet_jobs and ratchet_job_tags afterwards: {time.perf_counter() - t0:.0f} s"
            )
            print("\n".join(bloat(store)))
    finally:
        for store in stores.values():
            store.close()
        for drop in drops:
            drop()
    return 0


def _merge(runs: list[dict[str, float]]) -> dict[str, float]:
    """The figures of interleaved runs together: medians of the p50s and p99s, total rate."""
    return {
        "p50": statistics.median(r["p50"] for r in runs),
        "p99": statistics.median(r["p99"] for r in runs),
        "rate": statistics.median(r["rate"] for r in runs),
    }


if __name__ == "__main__":
    sys.exit(main())
