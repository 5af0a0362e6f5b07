"""Throughput of the SQL store next to raw SQL doing the same work, per backend.

    .venv/bin/python benchmarks/bench_store.py --backend all --jobs 10000

For each backend a scratch database is created (a temp file for SQLite, a fresh database on the
local PostgreSQL / MariaDB servers, dropped afterwards) and the Ratchet schema migrated. Measured:

* single insert: ``insert_job`` one job per transaction (jobs/s), vs one INSERT per transaction;
* bulk insert: ``bulk_insert`` of ``--jobs`` jobs, vs one executemany INSERT;
* claim+complete: ``claim_next_batch(--batch)`` then ``mark_succeeded_many`` until the table is
  drained (jobs/s), vs raw claim statements (SKIP LOCKED / BEGIN IMMEDIATE + UPDATE) and one
  UPDATE by ids per batch, without fencing or tags.

The raw baseline runs on the same table, indexes and engine, so the ratio is Ratchet's overhead.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from ratchet_api.store import Completion, JobEntity
from ratchet_store_sql import SqlJobStore, migrate
from ratchet_store_sql._engine import IMMEDIATE
from ratchet_store_sql.schema import metadata

PG = os.environ.get("RATCHET_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432")
MARIADB = os.environ.get("RATCHET_BENCH_MARIADB", "mysql+pymysql://root@127.0.0.1:3306")


@contextmanager
def scratch_database(backend: str) -> Iterator[str]:
    name = f"ratchet_bench_{uuid.uuid4().hex[:8]}"
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/bench.db"
        return
    server = PG if backend == "postgresql" else MARIADB
    admin_db = "/postgres" if backend == "postgresql" else "/"
    admin = sa.create_engine(server + admin_db, isolation_level="AUTOCOMMIT")
    quote = '"' if backend == "postgresql" else "`"
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {quote}{name}{quote}")
    try:
        suffix = "?charset=utf8mb4" if backend == "mariadb" else ""
        yield f"{server}/{name}{suffix}"
    finally:
        with admin.connect() as conn:
            force = " WITH (FORCE)" if backend == "postgresql" else ""
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {quote}{name}{quote}{force}")
        admin.dispose()


def timed(action: Callable[[], Any]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def empty(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        for table in reversed(metadata.sorted_tables):
            conn.execute(table.delete())


def due_jobs(n: int) -> list[JobEntity]:
    past = datetime.now(UTC) - timedelta(seconds=5)
    return [JobEntity(scheduled_at=past, target="bench:noop") for _ in range(n)]


# ---------------------------------------------------------------- Ratchet


def ratchet_single(store: SqlJobStore, n: int) -> float:
    jobs = due_jobs(n)
    return n / timed(lambda: [store.insert_job(j) for j in jobs])


def ratchet_bulk(store: SqlJobStore, n: int) -> float:
    jobs = due_jobs(n)
    return timed(lambda: store.bulk_insert(jobs))


def ratchet_claim_complete(store: SqlJobStore, batch: int) -> tuple[int, float]:
    done = 0

    def drain() -> None:
        nonlocal done
        while claimed := store.claim_next_batch("bench", batch):
            store.mark_succeeded_many(
                [Completion(job_id=j.id, claim_seq=j.claim_seq, result=None) for j in claimed]
            )
            done += len(claimed)

    elapsed = timed(drain)
    return done, done / elapsed


# ---------------------------------------------------------------- raw SQL baseline

RAW_INSERT = sa.text(
    "INSERT INTO ratchet_jobs (id, status, priority, job_type, target, payload, scheduled_at,"
    " created_at, updated_at, attempt, max_retries, claim_seq) VALUES (:id, 'PENDING', 0,"
    " 'STANDARD', 'bench:noop', '{}', :at, :at, :at, 0, 3, 0)"
)


def raw_rows(engine: sa.Engine, n: int) -> list[dict[str, Any]]:
    at = datetime.now(UTC).replace(tzinfo=None) - timedelta(seconds=5)
    as_id: Callable[[uuid.UUID], Any] = (
        (lambda u: u) if engine.dialect.name == "postgresql" else (lambda u: u.hex)
    )
    stamp: Any = at if engine.dialect.name != "sqlite" else at.isoformat(" ")
    return [{"id": as_id(uuid.uuid4()), "at": stamp} for _ in range(n)]


def write_conn(engine: sa.Engine) -> Any:
    conn = engine.connect()
    if engine.dialect.name == "sqlite":
        conn.execution_options(**{IMMEDIATE: True})
    return conn


def raw_single(engine: sa.Engine, n: int) -> float:
    rows = raw_rows(engine, n)

    def run() -> None:
        with write_conn(engine) as conn:
            for row in rows:
                conn.execute(RAW_INSERT, row)
                conn.commit()

    return n / timed(run)


def raw_bulk(engine: sa.Engine, n: int) -> float:
    rows = raw_rows(engine, n)

    def run() -> None:
        with write_conn(engine) as conn:
            conn.execute(RAW_INSERT, rows)
            conn.commit()

    return timed(run)


def raw_claim_complete(engine: sa.Engine, batch: int) -> tuple[int, float]:
    name = engine.dialect.name
    now = {
        "postgresql": "(now() AT TIME ZONE 'UTC')",
        "mysql": "UTC_TIMESTAMP(6)",
        "sqlite": "strftime('%Y-%m-%d %H:%M:%f','now')",
    }[name]
    pick = (
        "SELECT id FROM ratchet_jobs WHERE status = 'PENDING' AND scheduled_at <= "
        f"{now} ORDER BY priority DESC, scheduled_at, id LIMIT {batch}"
    )
    set_running = (
        f"status = 'RUNNING', owner = 'raw', started_at = {now}, heartbeat_at = {now},"
        " attempt = attempt + 1, claim_seq = claim_seq + 1"
    )
    done = 0

    def drain() -> None:
        nonlocal done
        with write_conn(engine) as conn:
            while True:
                if name == "mysql":
                    ids = list(conn.exec_driver_sql(pick + " FOR UPDATE SKIP LOCKED").scalars())
                    if ids:
                        marks = ",".join(["%s"] * len(ids))
                        conn.exec_driver_sql(
                            f"UPDATE ratchet_jobs SET {set_running} WHERE id IN ({marks})",
                            tuple(ids),
                        )
                else:
                    lock = " FOR UPDATE SKIP LOCKED" if name == "postgresql" else ""
                    ids = list(
                        conn.exec_driver_sql(
                            f"UPDATE ratchet_jobs SET {set_running} WHERE id IN ({pick}{lock})"
                            " RETURNING id"
                        ).scalars()
                    )
                conn.commit()
                if not ids:
                    return
                mark = "%s" if name != "sqlite" else "?"
                marks = ",".join([mark] * len(ids))
                conn.exec_driver_sql(
                    "UPDATE ratchet_jobs SET status = 'SUCCEEDED', owner = NULL,"
                    f" finished_at = {now} WHERE status = 'RUNNING' AND id IN ({marks})",
                    tuple(ids),
                )
                conn.commit()
                done += len(ids)

    elapsed = timed(drain)
    return done, done / elapsed


# ---------------------------------------------------------------- driver


def bench(backend: str, jobs: int, batch: int, singles: int) -> dict[str, float]:
    with scratch_database(backend) as url:
        migrate(url)
        store = SqlJobStore(url)
        engine = store.engine
        try:
            out: dict[str, float] = {}
            empty(engine)
            out["raw single insert/s"] = raw_single(engine, singles)
            empty(engine)
            out["ratchet single insert/s"] = ratchet_single(store, singles)
            empty(engine)
            out["raw bulk insert s"] = raw_bulk(engine, jobs)
            n, out["raw claim+complete/s"] = raw_claim_complete(engine, batch)
            assert n == jobs, f"raw drained {n} of {jobs}"
            empty(engine)
            out["ratchet bulk insert s"] = ratchet_bulk(store, jobs)
            n, out["ratchet claim+complete/s"] = ratchet_claim_complete(store, batch)
            assert n == jobs, f"ratchet drained {n} of {jobs}"
            empty(engine)
            return out
        finally:
            store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--backend", choices=["sqlite", "postgresql", "mariadb", "all"], default="all"
    )
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs bulk-inserted and drained")
    parser.add_argument("--batch", type=int, default=100, help="claim batch size")
    parser.add_argument("--singles", type=int, default=1000, help="jobs inserted one by one")
    args = parser.parse_args(argv)
    backends = ["sqlite", "postgresql", "mariadb"] if args.backend == "all" else [args.backend]
    print(f"jobs={args.jobs} batch={args.batch} singles={args.singles}")
    header = f"{'backend':<11} {'op':<26} {'raw':>12} {'ratchet':>12} {'ratchet/raw':>12}"
    print(header)
    print("-" * len(header))
    for backend in backends:
        r = bench(backend, args.jobs, args.batch, args.singles)
        bulk_raw = args.jobs / r["raw bulk insert s"]
        bulk_rat = args.jobs / r["ratchet bulk insert s"]
        rows = [
            ("single insert (jobs/s)", r["raw single insert/s"], r["ratchet single insert/s"]),
            (f"bulk insert {args.jobs} (jobs/s)", bulk_raw, bulk_rat),
            ("claim+complete (jobs/s)", r["raw claim+complete/s"], r["ratchet claim+complete/s"]),
        ]
        for op, raw, rat in rows:
            print(f"{backend:<11} {op:<26} {raw:>12,.0f} {rat:>12,.0f} {rat / raw:>12.2f}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
