"""What one claim of a big backlog touches on PostgreSQL, next to a small one: per claim and per
batched completion, the buffers hit, read (from outside shared buffers), dirtied and written,
the WAL records, full-page images and bytes, and the server / statement / commit times. A
benchmark, never a test (issue 27: why the claim at 1,000,000 pending is slower than at 10,000
while its plan is the same).

    .venv/bin/python benchmarks/bench_claim_touch.py                          # 10k vs 1M
    .venv/bin/python benchmarks/bench_claim_touch.py --variants 10000 1000000 \
        1000000:pk-and-claim-only 1000000:claim-ordered                     # where the pages are

Each variant is a scratch database loaded by ``bench_backlog.load`` (the same backlog: random
priorities, random ids; few finished rows, a claim reads no history). A variant may change the
loaded database:

* ``N:pk-and-claim-only``: every index of ``ratchet_jobs`` dropped but the primary key and the
  claim index (what the claim's row updates cost without the secondary indexes);
* ``N:claim-ordered``: the heap rewritten in claim order (``CLUSTER`` by priority, due time, id),
  so that the claimed rows of one claim share a few heap pages; the ids stay random.

The store's own claim and completion statements are captured from one call each, then run as
``EXPLAIN (ANALYZE, BUFFERS, WAL)`` and committed (so the backlog evolves as under real claims),
``--claims`` per variant and round, interleaved between the variants, a ``CHECKPOINT`` at the
start of each round (the first change of a page after a checkpoint logs the whole page). After
each completion as many due jobs are inserted as were completed (not measured).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import bench_backlog as b

FIGURES = {
    "Shared Hit Blocks": "hit",
    "Shared Read Blocks": "read",
    "Shared Dirtied Blocks": "dirtied",
    "Shared Written Blocks": "written",
    "WAL Records": "WAL records",
    "WAL FPI": "full pages",
    "WAL Bytes": "WAL KiB",
}


def explained(raw: Any, statement: str, parameters: Any) -> dict[str, float]:
    """One run of ``statement`` under ``EXPLAIN (ANALYZE, BUFFERS, WAL)``, committed."""
    cursor = raw.cursor()
    t0 = time.perf_counter()
    cursor.execute("EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) " + statement, parameters)
    (document,) = cursor.fetchone()
    t1 = time.perf_counter()
    raw.commit()
    t2 = time.perf_counter()
    if isinstance(document, str):
        document = json.loads(document)
    top = document[0]["Plan"]
    figures = {name: float(top.get(key, 0)) for key, name in FIGURES.items()}
    figures["WAL KiB"] /= 1024
    figures["server ms"] = document[0]["Execution Time"]
    figures["statement ms"] = (t1 - t0) * 1000
    figures["commit ms"] = (t2 - t1) * 1000
    return figures


def prepare(store: Any, change: str) -> None:
    if change == "pk-and-claim-only":
        for (index,) in b.sql(
            store,
            "SELECT indexrelname FROM pg_stat_user_indexes WHERE relname = 'ratchet_jobs'"
            " AND indexrelname NOT IN ('pk_ratchet_jobs', 'ix_ratchet_jobs_claim')",
        ):
            if index.startswith("uq_"):
                b.sql(store, f"ALTER TABLE ratchet_jobs DROP CONSTRAINT {index}")
            else:
                b.sql(store, f"DROP INDEX {index}")
    elif change == "claim-ordered":
        b.sql(
            store,
            "CREATE INDEX bench_claim_order ON ratchet_jobs (priority DESC, scheduled_at, id)",
        )
        b.sql(store, "CLUSTER ratchet_jobs USING bench_claim_order")
        b.sql(store, "DROP INDEX bench_claim_order")
        b.sql(store, "VACUUM ANALYZE ratchet_jobs")
    elif change:
        raise SystemExit(f"unknown variant change {change!r}")
    b.sql(store, "CHECKPOINT")


def main(argv: list[str] | None = None) -> int:
    from ratchet_api.store import JobEntity
    from ratchet_api.store.entities import Completion
    from ratchet_store_sql import SqlJobStore, migrate

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", nargs="+", default=["10000", "1000000"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--claims", type=int, default=100, help="per variant and round")
    parser.add_argument("--batch", type=int, default=50)
    args = parser.parse_args(argv)
    print(f"load {' '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)
    stores: dict[str, Any] = {}
    statements: dict[str, tuple[str, Any, str, Any]] = {}
    drops = []
    rng = random.Random(3)
    try:
        for variant in args.variants:
            count, _, change = variant.partition(":")
            url, drop = b.scratch()
            drops.append(drop)
            migrate(url)
            store = stores[variant] = SqlJobStore(url)
            b.load(store, int(count), min(int(count), 20_000), 60)
            prepare(store, change)
            claim_seen, jobs = b.captured(
                store, lambda s=store: s.claim_next_batch("bench-node", args.batch)
            )
            done_seen, _ = b.captured(
                store,
                lambda s=store, js=jobs: s.mark_succeeded_many(
                    [Completion(job_id=j.id, claim_seq=j.claim_seq, result="null") for j in js]
                ),
            )
            assert claim_seen is not None and done_seen is not None, "no UPDATE was sent"
            statements[variant] = (*claim_seen, *done_seen)
            (size,) = b.sql(store, "SELECT pg_total_relation_size('ratchet_jobs')")[0]
            print(f"{variant} loaded: ratchet_jobs {size / 2**20:,.0f} MiB", flush=True)
        results: dict[str, dict[str, list[dict[str, float]]]] = {
            v: {"claim": [], "completion": []} for v in stores
        }
        for _ in range(args.rounds):
            b.sql(next(iter(stores.values())), "CHECKPOINT")
            for variant, store in stores.items():
                claim, claim_params, done, done_params = statements[variant]
                raw = store.engine.raw_connection()
                try:
                    for _ in range(args.claims):
                        results[variant]["claim"].append(explained(raw, claim, claim_params))
                        cursor = raw.cursor()
                        cursor.execute(
                            "SELECT id, claim_seq, execution_target FROM ratchet_jobs"
                            " WHERE owner = 'bench-node' AND status = 'RUNNING'"
                        )
                        rows = cursor.fetchall()
                        raw.commit()
                        params = {
                            **done_params,
                            "ids": [r[0] for r in rows],
                            "seqs": [r[1] for r in rows],
                            "results": ["null"] * len(rows),
                        }
                        results[variant]["completion"].append(explained(raw, done, params))
                        now = datetime.now(UTC)
                        store.bulk_insert(
                            [
                                JobEntity(
                                    target="tests.engine.targets:noop",
                                    priority=rng.randint(-50, 50),
                                    tags=(f"tenant-{rng.randrange(10)}",),
                                    execution_target=r[2],
                                    scheduled_at=now - timedelta(seconds=rng.uniform(0, 3600)),
                                )
                                for r in rows
                            ]
                        )
                finally:
                    raw.close()
        print(f"load {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
        names = [*FIGURES.values(), "server ms", "statement ms", "commit ms"]
        print(f"medians per statement\n| variant | statement | {' | '.join(names)} |")
        print("|---|---|" + "---:|" * len(names))
        for variant, by in results.items():
            for kind, runs in by.items():
                medians = [statistics.median(r[n] for r in runs) for n in names]
                print(f"| {variant} | {kind} | " + " | ".join(f"{m:,.1f}" for m in medians) + " |")
    finally:
        for store in stores.values():
            store.close()
        for drop in drops:
            drop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
