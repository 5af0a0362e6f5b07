"""A ``ratchet worker`` process exits on SIGTERM even while a job never returns (issue 17).

The job's thread is abandoned after ``--shutdown-timeout``: the job is put back to pending, the
process logs which job it abandoned and exits with code 3; a second signal exits at once.
"""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path

import pytest

from ratchet_api.model import JobStatus
from ratchet_core.cli.worker import ABANDONED_EXIT_CODE
from tests.engine import targets
from tests.engine.conftest import build_container, migrate
from tests.engine.test_crash_worker import start_worker, stop, wait_for

pytestmark = pytest.mark.slow

MARGIN = 8.0
"""Seconds beyond the shutdown timeout the process may take (interpreter start-up aside:
the clock starts at the signal). The old worker never exited."""


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'exit.db'}"


def _enqueue_endless(url: str, tmp_path: Path) -> tuple[uuid.UUID, Path]:
    container = build_container(url)
    store = container.job_store()
    migrate(store)
    marker = tmp_path / "started"
    job_id = container.scheduler().enqueue(targets.endless, str(marker))
    store.close()
    return job_id, marker


def test_sigterm_with_an_endless_job_exits_after_the_shutdown_timeout(
    sqlite_url: str, tmp_path: Path
) -> None:
    job_id, marker = _enqueue_endless(sqlite_url, tmp_path)
    worker = start_worker(
        sqlite_url, f"exit-{uuid.uuid4().hex[:8]}", tmp_path, "--shutdown-timeout", "1"
    )
    try:
        wait_for(marker.exists, 60, "the endless job to start")
        sent = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        output = worker.communicate(timeout=1 + MARGIN + 30)[0].decode(errors="replace")
        took = time.monotonic() - sent
    finally:
        stop(worker)
    assert took < 1 + MARGIN, f"exit took {took:.1f}s\n{output}"
    assert worker.returncode == ABANDONED_EXIT_CODE, output
    assert str(job_id) in output and "abandoned" in output, output
    container = build_container(sqlite_url)
    job = container.job_store().find_by_id(job_id)
    assert job is not None and job.status is JobStatus.PENDING
    container.job_store().close()


def test_a_second_signal_exits_at_once(sqlite_url: str, tmp_path: Path) -> None:
    _, marker = _enqueue_endless(sqlite_url, tmp_path)
    worker = start_worker(
        sqlite_url, f"exit2-{uuid.uuid4().hex[:8]}", tmp_path, "--shutdown-timeout", "600"
    )
    try:
        wait_for(marker.exists, 60, "the endless job to start")
        worker.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert worker.poll() is None, "the first signal must stop gracefully (wait for the job)"
        sent = time.monotonic()
        worker.send_signal(signal.SIGINT)
        output = worker.communicate(timeout=30)[0].decode(errors="replace")
        took = time.monotonic() - sent
    finally:
        stop(worker)
    assert took < MARGIN, f"exit took {took:.1f}s\n{output}"
    assert worker.returncode == 128 + signal.SIGINT, output
