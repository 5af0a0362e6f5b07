"""Fairness keys with a real worker on every store: a tenant's backlog enqueued first does
not hold back the jobs of the tenants enqueued after it (``FairClaimStore``). The start order
is what the jobs themselves wrote (one line each, appended when they start)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ratchet_api.model import JobStatus
from tests.conftest import ALL_BACKENDS, backend_url
from tests.engine import targets

A_JOBS = 24
OTHER_JOBS = 4


@pytest.fixture(params=ALL_BACKENDS)
def store_url(request: pytest.FixtureRequest) -> str:
    return backend_url(request, request.param)


def _enqueue(scheduler: Any, path: Path, key: str, number: int, at: datetime) -> Any:
    return (
        scheduler.job(targets.append_line)
        .args(str(path), number, 20)
        .fairness_key(key)
        .at(at)
        .enqueue()
    )


def test_a_worker_interleaves_tenants_behind_a_backlog(
    engine: Any, make_worker: Any, tmp_path: Path
) -> None:
    scheduler = engine.scheduler()
    path = tmp_path / "starts.txt"
    base = datetime.now(UTC) - timedelta(minutes=5)
    # tenant A's backlog is due first; B's and C's jobs came after all of it
    ids = [
        _enqueue(scheduler, path, "tenant-a", 100 + i, base + timedelta(milliseconds=i))
        for i in range(A_JOBS)
    ]
    for offset, key in ((200, "tenant-b"), (300, "tenant-c")):
        ids += [
            _enqueue(scheduler, path, key, offset + i, base + timedelta(minutes=1, seconds=i))
            for i in range(OTHER_JOBS)
        ]
    stats = make_worker(engine, concurrency=3, prefetch=0).run_until_idle(60)
    assert stats.idle
    assert all(scheduler.get(job_id).status is JobStatus.SUCCEEDED for job_id in ids)
    starts = [int(line) for line in path.read_text().split()]
    assert sorted(starts) == sorted([*range(100, 100 + A_JOBS), *range(200, 204), *range(300, 304)])
    tenants = [n // 100 for n in starts]
    # Without fairness every A job would start first (they are all due earlier). With it each
    # tenant gets a share of the running slots: B's and C's 8 jobs all start before half of
    # A's backlog has.
    last_other = max(i for i, t in enumerate(tenants) if t != 1)
    a_before = tenants[:last_other].count(1)
    assert a_before < A_JOBS // 2, f"start order by tenant: {tenants}"


def test_a_bad_fairness_key_is_refused_at_declaration(engine: Any) -> None:
    from ratchet_api.errors import InvalidJobError

    builder = engine.scheduler().job(targets.add)
    for bad in ("", "   ", "k" * 256, 42):
        with pytest.raises(InvalidJobError, match="fairness_key"):
            builder.fairness_key(bad)
    job_id = builder.args(1, 2).fairness_key("k" * 255).enqueue()
    assert engine.scheduler().get(job_id).fairness_key == "k" * 255
