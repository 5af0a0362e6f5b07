"""Started marks written by the claim itself (issue 23, ``WorkerBatchStore.claim_and_start``)
under a real SIGKILL: the jobs a worker started at once were marked by their claim statement, so
recovery charges their attempt; the jobs it had prefetched and never started go back uncharged."""

from __future__ import annotations

import signal
import uuid
from datetime import timedelta
from pathlib import Path

from ratchet_api.model import JobStatus
from tests.crash.harness import kill, start_worker, wait_for
from tests.engine import targets
from tests.engine.conftest import build_container, migrate


def test_a_killed_worker_is_charged_for_the_jobs_it_started_not_for_those_it_prefetched(
    sql_store_url: str, tmp_path: Path
) -> None:
    container = build_container(sql_store_url)
    store = container.job_store()
    migrate(store)
    scheduler = container.scheduler()
    log = tmp_path / "executions.log"
    # claimed in this order: the two long jobs start at once (two slots), the six others wait
    # in the prefetch buffer behind them and never start
    started = [
        scheduler.job(targets.append_line).args(str(log), n, 120_000).max_retries(0).enqueue()
        for n in range(2)
    ]
    prefetched = [
        scheduler.job(targets.append_line).args(str(log), n, 0).max_retries(0).enqueue()
        for n in range(10, 16)
    ]
    node_id = f"marks-{uuid.uuid4().hex[:8]}"
    worker = start_worker(sql_store_url, node_id, tmp_path, 2, **{"worker.prefetch": "6"})
    try:

        def held() -> bool:
            jobs = [store.find_by_id(j) for j in (*started, *prefetched)]
            lines = log.read_text().split() if log.exists() else []
            return len(lines) == 2 and all(
                j is not None and j.status is JobStatus.RUNNING for j in jobs
            )

        wait_for(held, 60, "two jobs running and six prefetched")
        for job_id in started:
            job = store.find_by_id(job_id)
            assert job is not None and job.dispatched_at is not None
            assert job.dispatched_at == job.started_at, "marked by the claim statement itself"
        for job_id in prefetched:
            job = store.find_by_id(job_id)
            assert job is not None and job.dispatched_at is None, "prefetched: never started"
        worker.send_signal(signal.SIGKILL)
        worker.wait(30)
    finally:
        kill(worker)
    # the recovery sweep's reset, as another node would run it once the node is dead
    after = store.server_now() + timedelta(seconds=1)
    assert store.reset_orphan_jobs([node_id], after) == 8
    for job_id in started:
        job = store.find_by_id(job_id)
        assert job is not None and (job.status, job.attempt) == (JobStatus.PENDING, 1)
    for job_id in prefetched:
        job = store.find_by_id(job_id)
        assert job is not None and (job.status, job.attempt) == (JobStatus.PENDING, 0)
    assert sorted(int(n) for n in log.read_text().split()) == [0, 1], "only two ever started"
    store.close()
