"""Retention throughput: how fast a sweep archives and then deletes finished jobs.

    .venv/bin/python benchmarks/bench_retention.py --backend all --jobs 10000

Per backend: ``--jobs`` finished jobs (a third each SUCCEEDED, FAILED, CANCELLED) finished
100 days ago are bulk-inserted, then one ``Retention.sweep`` archives them (step 1, batches of
``--batch``) with ``retention.archive`` off, and a second sweep with ``retention.archive = 30d``
deletes them from the archive (step 2). Prints jobs/s of each step. Not a test: nothing is
asserted. Mongo runs when ``RATCHET_BENCH_MONGO`` names a server (a fresh database is used).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_store import scratch_database

from ratchet_api.ids import uuid7
from ratchet_api.model import JobStatus
from ratchet_api.store.entities import JobEntity
from ratchet_api.store.protocols import JobStore, SchemaManager
from ratchet_core.features.retention import Retention, RetentionPolicy
from ratchet_core.runtime.stores import open_store

STATUSES = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


def finished_jobs(store: JobStore, n: int) -> list[JobEntity]:
    at = store.server_now() - timedelta(days=100)
    return [
        JobEntity(
            id=uuid7(),
            status=STATUSES[i % 3],
            target="bench:noop",
            payload='{"v":1,"module":"bench","qualname":"noop","args":[],"kwargs":{}}',
            scheduled_at=at,
            created_at=at,
            updated_at=at,
            started_at=at,
            finished_at=at,
            attempt=1,
            tags=("bench",),
        )
        for i in range(n)
    ]


def bench(url: str, jobs: int, batch: int) -> tuple[float, float]:
    store = open_store(url)
    try:
        manager = store.capability(SchemaManager)
        if manager is not None:
            manager.upgrade()
        rows = finished_jobs(store, jobs)
        for start in range(0, jobs, 1000):
            store.bulk_insert(rows[start : start + 1000])
        archive = Retention(store, RetentionPolicy(batch_size=batch, archive=None))
        started = time.perf_counter()
        report = archive.sweep()
        archived = time.perf_counter() - started
        assert sum(report.archived.values()) == jobs, report
        purge = Retention(store, RetentionPolicy(batch_size=batch, archive=timedelta(days=30)))
        started = time.perf_counter()
        report = purge.sweep()
        deleted = time.perf_counter() - started
        assert report.archive_deleted == jobs, report
        return jobs / archived, jobs / deleted
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="all", help="sqlite|postgresql|mariadb|mongodb|all")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args(argv)
    backends = (
        ["sqlite", "postgresql", "mariadb", "mongodb"] if args.backend == "all" else [args.backend]
    )
    print(f"{'backend':<11} {'archive jobs/s':>15} {'delete jobs/s':>14}")
    for backend in backends:
        if backend == "mongodb":
            server = os.environ.get("RATCHET_BENCH_MONGO")
            if not server:
                print(f"{backend:<11} skipped (set RATCHET_BENCH_MONGO)")
                continue
            base, _, query = server.partition("?")
            url = f"{base.rstrip('/')}/ratchet_bench_{uuid.uuid4().hex[:8]}?{query}"
            archive_rate, delete_rate = bench(url, args.jobs, args.batch)
        else:
            with scratch_database(backend) as url:
                archive_rate, delete_rate = bench(url, args.jobs, args.batch)
        print(f"{backend:<11} {archive_rate:>15,.0f} {delete_rate:>14,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
