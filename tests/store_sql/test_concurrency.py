"""Several processes claiming from one table: no job is claimed twice, none is skipped."""

from __future__ import annotations

import multiprocessing
import threading
from collections import Counter
from datetime import timedelta

import pytest

from ratchet_api.model import JobStatus
from ratchet_api.store import JobEntity, JobQuery
from ratchet_store_sql import SqlJobStore
from tests.store_sql import _workers

PROCESSES = 4
JOBS = 2000


@pytest.mark.slow
def test_four_processes_claim_2000_jobs_each_exactly_once(
    store: SqlJobStore, db_url: str, backend: str
) -> None:
    ids = {j.id for j in (JobEntity() for _ in range(JOBS))}
    store.bulk_insert([JobEntity(id=i) for i in ids])
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager, ctx.Pool(PROCESSES) as pool:
        barrier = manager.Barrier(PROCESSES)
        results = pool.starmap(
            _workers.claim_until_empty,
            [(db_url, f"node-{n}", 25, barrier) for n in range(PROCESSES)],
        )
    counts = Counter(job_id for claimed in results for job_id in claimed)
    assert [job_id for job_id, n in counts.items() if n > 1] == []
    assert {str(i) for i in ids} == set(counts)
    if backend != "sqlite":
        # (SQLite's busy handler is not fair: one writer may take every batch)
        assert sum(1 for r in results if r) >= 2, "the claims should have overlapped"
    done = store.count_jobs(JobQuery(statuses=frozenset({JobStatus.SUCCEEDED})))
    assert done == JOBS


def test_racing_lock_acquisition_has_one_winner(store: SqlJobStore) -> None:
    winners: list[str] = []
    barrier = threading.Barrier(8)

    def race(owner: str) -> None:
        barrier.wait()
        if store.try_lock("startup", owner, timedelta(seconds=30)):
            winners.append(owner)

    threads = [threading.Thread(target=race, args=(f"o{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1
    lock = store.find_lock("startup")
    assert lock is not None and lock.owner == winners[0]


def test_racing_permit_acquisition_never_exceeds_the_limit(store: SqlJobStore) -> None:
    granted: list[str] = []
    barrier = threading.Barrier(8)

    def race(holder: str) -> None:
        barrier.wait()
        if store.try_acquire_permit("api", holder, 3, timedelta(seconds=30)):
            granted.append(holder)

    threads = [threading.Thread(target=race, args=(f"h{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(granted) == 3
    assert store.count_permits("api") == 3
