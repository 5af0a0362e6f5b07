"""What each index of ``ratchet_jobs`` costs a SQLite enqueue: raw ``sqlite3`` inserts of a
job row, no Ratchet code around them (issue 23).

Usage::

    .venv/bin/python benchmarks/bench_sqlite_row_indexes.py                      # frames, CPU
    .venv/bin/python benchmarks/bench_sqlite_row_indexes.py --synchronous full --jobs 1500

The table and its indexes are read from a scratch file migrated by this checkout's migrations
(``sqlite_master``), then each variant is created in a fresh file: ``as-migrated``;
``+full-key-index`` (a unique index of every row's ``idempotency_key``, NULLs included: what the
``UNIQUE`` constraint of today's schema writes); ``partial-key-index`` (that constraint replaced by
a unique index of the keyed rows only: the migration measured on branch ``sqlite1`` and not
landed, see benchmarks/README.md); ``without-rowid`` (the table clustered on
its ``id``, no separate primary-key index); ``page-size-1024`` (the file created with 1 KiB
pages instead of 4 KiB: each WAL frame a quarter of the bytes); and, for reference only, the table without one of
the indexes that every new job enters (``-target``, ``-created_at``, ``-fair_claim``; the
store reads them, they cannot go). Each variant gets ``--prefill`` rows in one transaction,
then ``--jobs`` single inserts, each ``BEGIN IMMEDIATE`` / ``INSERT`` / ``COMMIT`` in WAL mode at
``--synchronous``, the variants taking turns over ``--rounds``. Printed: inserts/s and CPU per
insert (medians), and the WAL frames one insert writes (``PRAGMA wal_checkpoint`` over windows
of 100 inserts, below the 1,000-frame automatic checkpoint; page splits included).
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from ratchet_api.ids import uuid7
from ratchet_store_sql import migrate

COLUMNS = (
    "id, status, priority, job_type, target, payload, scheduled_at, created_at, updated_at, "
    "attempt, max_retries, claim_seq"
)
INSERT = f"INSERT INTO ratchet_jobs ({COLUMNS}) VALUES ({', '.join('?' * 12)})"
KEY_INDEX = "uq_ratchet_jobs_idempotency_key"


def schema(tmp: Path) -> tuple[str, list[str]]:
    """(``CREATE TABLE ratchet_jobs``, its ``CREATE INDEX`` statements) as migrated."""
    path = tmp / "migrated.db"
    migrate(f"sqlite:///{path}")
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT type, sql FROM sqlite_master WHERE tbl_name = 'ratchet_jobs' "
            "AND sql IS NOT NULL"
        ).fetchall()
    finally:
        conn.close()
    (table,) = (sql for kind, sql in rows if kind == "table")
    return table, [sql for kind, sql in rows if kind == "index"]


def variants(table: str, indexes: list[str]) -> dict[str, list[str]]:
    def without(name: str) -> list[str]:
        return [table, *(i for i in indexes if f" {name} ON" not in i)]

    keyless = [i for i in indexes if KEY_INDEX not in i]
    constraint = re.compile(
        r",\s*CONSTRAINT\s+\"?" + KEY_INDEX + r"\"?\s+UNIQUE\s*\(\s*\"?idempotency_key\"?\s*\)"
    )
    unconstrained = constraint.sub("", table)
    partial_key = (
        f"CREATE UNIQUE INDEX {KEY_INDEX} ON ratchet_jobs (idempotency_key) "
        "WHERE idempotency_key IS NOT NULL"
    )
    full_key = f"CREATE UNIQUE INDEX {KEY_INDEX} ON ratchet_jobs (idempotency_key)"
    return {
        "as-migrated": [table, *indexes],
        "+full-key-index": [unconstrained, *keyless, full_key],
        "partial-key-index": [unconstrained, *keyless, partial_key],
        "without-rowid": [table.rstrip().rstrip(";") + " WITHOUT ROWID", *indexes],
        "page-size-1024": ["PRAGMA page_size=1024", table, *indexes],
        "-target": without("ix_ratchet_jobs_target"),
        "-created_at": without("ix_ratchet_jobs_created_at"),
        "-fair_claim": without("ix_ratchet_jobs_fair_claim"),
    }


def job_row() -> tuple[object, ...]:
    now = datetime.now(UTC).replace(tzinfo=None).isoformat(" ")
    payload = '{"v":1,"args":[],"kwargs":{}}'
    target = "tests.engine.targets:noop"
    return (uuid7().hex, "PENDING", 0, "STANDARD", target, payload, now, now, now, 0, 3, 0)


def run(path: Path, ddl: list[str], jobs: int, prefill: int, sync: str) -> tuple[float, ...]:
    """(inserts/s, CPU µs per insert, WAL frames per insert) of one fresh file."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in ddl:  # the page size first: it is fixed when the file is created
            if statement.startswith("PRAGMA"):
                conn.execute(statement)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={sync}")
        for statement in ddl:
            if not statement.startswith("PRAGMA"):
                conn.execute(statement)
        conn.execute("BEGIN")
        conn.executemany(INSERT, [job_row() for _ in range(prefill)])
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

        def single(rows: list[tuple[object, ...]]) -> None:
            for row in rows:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(INSERT, row)
                conn.execute("COMMIT")

        rows = [job_row() for _ in range(jobs)]
        cpu, wall = time.process_time(), time.perf_counter()
        single(rows)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        frames = 0
        windows = 3
        for _ in range(windows):
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            single([job_row() for _ in range(100)])
            frames += conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]
    finally:
        conn.close()
    return jobs / wall, cpu / jobs * 1e6, frames / (windows * 100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--prefill", type=int, default=800)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--synchronous", choices=["off", "normal", "full"], default="off")
    args = parser.parse_args(argv)
    median: Callable[[list[float]], float] = statistics.median
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        all_variants = variants(*schema(tmp))
        names = list(all_variants)
        results: dict[str, list[tuple[float, ...]]] = {name: [] for name in names}
        print(f"load average before: {os.getloadavg()}; synchronous={args.synchronous}, WAL")
        for index in range(args.rounds):
            for name in names if index % 2 == 0 else names[::-1]:
                ddl = all_variants[name]
                results[name].append(
                    run(tmp / "v.db", ddl, args.jobs, args.prefill, args.synchronous)
                )
        for name in names:
            got = results[name]
            print(
                f"  {name:16s} {median([r[0] for r in got]):8,.0f} inserts/s  "
                f"{median([r[1] for r in got]):5.0f} µs CPU  "
                f"{median([r[2] for r in got]):5.2f} WAL frames per insert"
            )
        print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
