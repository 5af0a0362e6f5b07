"""Failures are visible (issue 19): a real ``ratchet worker`` logs each failed attempt at
WARNING and each move to the dead letter at ERROR, with the sanitized traceback; the traceback
is kept with the attempt's execution record and shown by ``ratchet jobs show``."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from pathlib import Path

from ratchet_api.model import JobStatus
from ratchet_api.store.protocols import JobAuditStore
from tests.engine import targets
from tests.engine.conftest import build_container, migrate
from tests.engine.test_crash_worker import RATCHET, REPO, start_worker, stop, wait_for

SECRET = "postgresql://app:hunter2@db.internal/app"


def test_failed_attempts_and_the_dead_letter_are_logged_stored_and_shown(
    sqlite_url: str, tmp_path: Path
) -> None:
    container = build_container(sqlite_url)
    store = container.job_store()
    migrate(store)
    job_id = (
        container.scheduler()
        .job(targets.fail_always)
        .args(f"cannot reach {SECRET}")
        .max_retries(1)
        .backoff(0.1)
        .enqueue()
    )
    worker = start_worker(sqlite_url, f"fail-{uuid.uuid4().hex[:8]}", tmp_path)
    try:

        def dead() -> bool:
            job = store.find_by_id(job_id)
            return job is not None and job.status is JobStatus.FAILED

        wait_for(dead, 60, "the job to reach the dead letter")
        worker.send_signal(signal.SIGTERM)
        output = worker.communicate(timeout=60)[0].decode(errors="replace")
    finally:
        stop(worker)
    flat = " ".join(output.split())  # rich wraps lines at the terminal width
    assert f"job {job_id}" in flat, output
    warning = flat.index("attempt 1 failed, retried in")
    error = flat.index("attempt 2 failed, sent to the dead letter")
    assert "WARNING" in flat[max(0, warning - 150) : warning], output
    assert "ERROR" in flat[max(0, error - 150) : error], output
    assert flat.count("Traceback (most recent call last)") == 2, output
    assert "in fail_always" in flat
    assert "hunter2" not in output, "the traceback was not sanitized"

    audit = store.capability(JobAuditStore)
    assert audit is not None
    records = audit.find_executions_by_job_id(job_id)
    assert [r.attempt for r in records] == [1, 2]
    for record in records:
        assert record.traceback is not None
        assert "Traceback" in record.traceback and "in fail_always" in record.traceback
        assert "hunter2" not in record.traceback
        assert record.traceback.endswith(record.error or "?")

    shown = subprocess.run(
        [RATCHET, "jobs", "show", str(job_id), "--url", sqlite_url],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert "traceback of attempt 2" in shown.stdout
    assert "in fail_always" in shown.stdout
    store.close()
