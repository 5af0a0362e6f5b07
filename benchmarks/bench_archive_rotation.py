"""Key rotation over archived jobs (``SealedArchiveStore``) against the same rotation over live
jobs: the cost of re-sealing a value that retention moved to the archive.

Usage::

    .venv/bin/python benchmarks/bench_archive_rotation.py --backend all --jobs 10000 --repeats 2

Each measurement uses a fresh scratch database (see ``bench_engine.py``) holding ``--jobs``
jobs of ``tests.engine.targets.echo_any`` enqueued with one AES-256-GCM key (its ~200-byte
payload sealed); ``rotate`` (batches of 500, in process) then re-seals every payload under a
second key. "live": the jobs are pending. "archived": the jobs were set CANCELLED behind the
store's back (one UPDATE, no worker) and moved by ``archive_finished_before``, so the live scan
finds nothing and every value is rewritten through ``replace_archived_values``. The two kinds
are interleaved (live, archived, live, archived, ...) on a shared machine.
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.engine import targets  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "bench_engine", REPO / "benchmarks" / "bench_engine.py"
)
assert _spec is not None and _spec.loader is not None
engine = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(engine)

ARGUMENT = {"order": 12345, "customer": "ada@example.com", "items": [f"sku-{i}" for i in range(12)]}


def key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def archive_all(store: object, jobs: int) -> None:
    import sqlalchemy as sa

    from ratchet_api.store.protocols import ArchiveStore
    from ratchet_store_sql import schema

    engine_ = store.engine  # type: ignore[attr-defined]
    now = store.server_now()  # type: ignore[attr-defined]
    with engine_.begin() as conn:
        conn.execute(
            sa.update(schema.jobs).values(status="CANCELLED", finished_at=now, updated_at=now)
        )
    archive = store.capability(ArchiveStore)  # type: ignore[attr-defined]
    cutoff = store.server_now() + timedelta(seconds=1)  # type: ignore[attr-defined]
    moved = 0
    while moved < jobs:
        step = archive.archive_finished_before(cutoff, 1000)
        if step == 0:
            break
        moved += step
    if moved != jobs:
        raise RuntimeError(f"archived {moved} of {jobs}")


def bench_rotate(url: str, jobs: int, archived: bool) -> float:
    from ratchet_core.payload.rotation import rotate

    old, new = f"old:{key()}", f"new:{key()}"
    before = engine.container(url, **{"encryption.keys": old})
    before.scheduler().enqueue_many(targets.echo_any, [(ARGUMENT,) for _ in range(jobs)])
    if archived:
        archive_all(before.job_store(), jobs)
    during = engine.container(
        url, **{"encryption.keys": f"{old},{new}", "encryption.current_key_id": "new"}
    )
    started = time.perf_counter()
    report = rotate(during.job_store(), during.payload_codec(), batch_size=500)
    elapsed = time.perf_counter() - started
    counts = report.archived if archived else report
    if counts.rewritten != jobs or report.archive_covered is not True:
        raise RuntimeError(f"rotated {counts.rewritten} of {jobs} ({report})")
    during.job_store().close()
    before.job_store().close()
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "all"], default="all")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    backends = ["sqlite", "postgresql"] if args.backend == "all" else [args.backend]
    print(f"load: {engine.load()}", flush=True)
    for backend in backends:
        for run in range(1, args.repeats + 1):
            seconds: dict[str, float] = {}
            for kind in ("live", "archived"):
                with engine.scratch(backend) as url:
                    seconds[kind] = bench_rotate(url, args.jobs, kind == "archived")
            live, archived = seconds["live"], seconds["archived"]
            print(
                f"[{backend}] run {run}: rotate {args.jobs} live {live:.1f} s "
                f"({args.jobs / live:,.0f}/s), archived {archived:.1f} s "
                f"({args.jobs / archived:,.0f}/s), archived:live time {archived / live:.2f}",
                flush=True,
            )
    print(f"load: {engine.load()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
