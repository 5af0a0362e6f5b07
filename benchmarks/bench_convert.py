"""Row -> JobEntity mapping on the claim path: the store's current converter against the
hand-written mapping of an earlier revision, in ONE process, interleaved round by round (so a
machine's changing load hits both alike). Not a test: nothing is asserted.

    .venv/bin/python benchmarks/bench_convert.py --rev fed0af3 --rows 100 --rounds 30
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import types
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ratchet_api.store.entities import JobEntity
from ratchet_store_sql import _convert as current

REPO = Path(__file__).resolve().parents[1]
PATH = "ratchet_store_sql/src/ratchet_store_sql/_convert.py"


def load_revision(rev: str) -> Any:
    source = subprocess.run(
        ["git", "show", f"{rev}:{PATH}"], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout
    module = types.ModuleType("_convert_before")
    # the repository's own file at an earlier revision
    exec(compile(source, f"{rev}:{PATH}", "exec"), module.__dict__)
    return module


def claimed_rows(count: int) -> list[dict[str, Any]]:
    """Rows as a claim returns them (RUNNING, owner, stamps), built through the current mapping
    so both sides read the same columns."""
    now = datetime.now(UTC)
    rows = []
    for n in range(count):
        job = JobEntity(target="bench:noop", payload='{"v":1}', max_retries=3)
        row = current.job_to_row(job)
        row.update(status="RUNNING", owner="bench", attempt=1, claim_seq=1, started_at=now)
        row.update(heartbeat_at=now, priority=5 if n % 2 else 10)
        rows.append(row)
    return rows


def per_row_us(fn: Any, rows: list[dict[str, Any]], fields: tuple[str, ...]) -> float:
    subset = [{k: r[k] for k in fields if k in r} | {"id": r["id"]} for r in rows]
    start = time.perf_counter()
    for row in subset:
        fn(row, ())
    return (time.perf_counter() - start) / len(rows) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rev", required=True, help="revision holding the earlier mapping")
    parser.add_argument("--rows", type=int, default=100, help="rows per claim batch")
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    before = load_revision(args.rev)
    rows = claimed_rows(args.rows)
    old_fields, new_fields = tuple(before.JOB_FIELDS), current.JOB_FIELDS
    timings: dict[str, list[float]] = {"before": [], "after": []}
    for _ in range(args.rounds):
        timings["before"].append(per_row_us(before.row_to_job, rows, old_fields))
        timings["after"].append(per_row_us(current.row_to_job, rows, new_fields))
    print(f"rows={args.rows} rounds={args.rounds} before={args.rev}")
    for name, values in timings.items():
        print(
            f"{name:>6}: median {statistics.median(values):6.2f} us/row, "
            f"min {min(values):6.2f} us/row"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
