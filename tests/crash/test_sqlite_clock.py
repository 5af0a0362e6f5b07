"""One time source on SQLite (issue 17): leases, heartbeats and due times are read from the
SQLite library's clock inside the statements, never from the application's Python clock. A
worker whose Python clock runs 30 s ahead (time-machine) must not declare its peers dead."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest

from ratchet_api.model import JobStatus
from tests.crash import targets
from tests.crash.harness import by_job, executions, kill, start_worker, wait_for, wait_for_nodes
from tests.engine.conftest import build_container, migrate

pytestmark = pytest.mark.slow


def test_a_worker_whose_clock_runs_ahead_declares_no_peer_dead(
    sqlite_url: str, tmp_path: Path
) -> None:
    pytest.importorskip("time_machine", reason="time-machine shifts the worker's Python clock")
    container = build_container(sqlite_url)
    store = container.job_store()
    migrate(store)
    scheduler = container.scheduler()
    log = tmp_path / "executions.log"
    # node timeout 10 s: a heartbeat late by 2 s on a loaded machine must not count as the
    # bug; the 30 s offset is still three times past it
    slow = {"worker.node_timeout": "10"}
    punctual_id = f"punctual-{uuid.uuid4().hex[:6]}"
    punctual = start_worker(sqlite_url, punctual_id, tmp_path, 2, **slow)
    ahead_id = f"ahead-{uuid.uuid4().hex[:6]}"
    ahead = start_worker(sqlite_url, ahead_id, tmp_path, 2, clock_offset=30, **slow)
    wait_for_nodes(store, punctual_id, ahead_id)
    ids = {
        scheduler.job(targets.record).args(str(log), n, 150).max_retries(0).enqueue(): n
        for n in range(80)
    }
    try:
        wait_for(
            lambda: all(store.find_by_id(i).status is JobStatus.SUCCEEDED for i in ids),
            120,
            "every job to succeed",
        )
        for worker in (punctual, ahead):
            worker.send_signal(signal.SIGTERM)
            worker.wait(30)
        ahead_log = (tmp_path / f"{ahead_id}.out").read_text(errors="replace")
        runs = by_job(executions(log))
        pids = {run.pid for job_runs in runs.values() for run in job_runs}
        assert pids == {punctual.pid, ahead.pid}, "both workers must have run jobs"
        assert "stopped heartbeating" not in ahead_log, ahead_log[-2000:]
        twice = {n: len(r) for n, r in runs.items() if len(r) > 1}
        assert not twice, f"jobs run more than once (a peer was declared dead): {twice}"
        assert set(runs) == set(ids.values())
    finally:
        kill(punctual)
        kill(ahead)
        store.close()
