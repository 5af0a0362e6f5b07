"""Workflow throughput: N two-step workflows (root + one ``then`` step that reads the root's
result) against N*2 plain jobs, run by one in-process worker, on SQLite or PostgreSQL.

    .venv/bin/python benchmarks/bench_workflows.py --backend sqlite --workflows 1000

Not a test: nothing is asserted. Prints jobs/s for both (last finished_at - first started_at).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ratchet_api.store.protocols import SchemaManager
from ratchet_core.runtime.container import create_container
from tests.engine import workflow_targets as t
from tests.engine.worker_fixtures import fast_settings


def _url(backend: str) -> tuple[str, Any]:
    if backend == "sqlite":
        return f"sqlite:///{tempfile.mkdtemp()}/bench.db", None
    import psycopg

    name = f"ratchet_bench_wf_{uuid.uuid4().hex[:8]}"
    with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}", drop


def _rate(store: Any, ids: list[Any]) -> float:
    jobs = [store.find_by_id(i) for i in ids]
    started = min(j.started_at for j in jobs)
    finished = max(j.finished_at for j in jobs)
    return len(jobs) / (finished - started).total_seconds()


def run(backend: str, workflows: int) -> None:
    url, drop = _url(backend)
    try:
        container = create_container({"store.url": url, "security.allowed_packages": "tests."})
        store = container.job_store()
        store.capability(SchemaManager).upgrade()
        scheduler = container.scheduler()
        settings = fast_settings(concurrency=8, prefetch=64)
        plain = scheduler.enqueue_many(t.double, [(i,) for i in range(workflows * 2)])
        begin = time.perf_counter()
        container.worker(worker_settings=settings).run_until_idle(timeout=600)
        plain_wall = time.perf_counter() - begin
        ids: list[Any] = []
        for i in range(workflows):
            builder = scheduler.job(t.double).args(i).then(t.add_one)
            builder.enqueue()
            ids.extend(builder.job_ids)
        begin = time.perf_counter()
        container.worker(worker_settings=settings).run_until_idle(timeout=600)
        flow_wall = time.perf_counter() - begin
        print(
            f"{backend}: plain {len(plain)} jobs {_rate(store, plain):,.0f} jobs/s "
            f"(wall {plain_wall:.1f}s); {workflows} two-step workflows {len(ids)} jobs "
            f"{_rate(store, ids):,.0f} jobs/s (wall {flow_wall:.1f}s)"
        )
        store.close()
    finally:
        if drop is not None:
            drop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--workflows", type=int, default=1000)
    options = parser.parse_args()
    run(options.backend, options.workflows)
