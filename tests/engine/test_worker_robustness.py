"""Worker robustness: whatever a job raises and whatever a pluggable part does, every claimed
job reaches an outcome and the worker keeps claiming."""

from __future__ import annotations

from typing import Any

from ratchet_api.model import JobStatus
from tests.engine import targets


def test_job_raising_system_exit_or_cancelled_error_is_a_failed_attempt_not_a_stuck_job(
    engine: Any, make_worker: Any
) -> None:
    scheduler = engine.scheduler()
    exiting = scheduler.job(targets.exits).args(3).max_retries(0).enqueue()
    cancelled = scheduler.job(targets.async_cancelled).max_retries(0).enqueue()
    after = scheduler.enqueue(targets.add, 1, 2)
    stats = make_worker(engine, concurrency=1, prefetch=0).run_until_idle(15)
    assert stats.idle, "a job stayed RUNNING on the worker"
    assert stats.running == 0
    exited = scheduler.get(exiting)
    assert exited.status is JobStatus.FAILED
    assert "SystemExit" in (exited.last_error or "")
    gone = scheduler.get(cancelled)
    assert gone.status is JobStatus.FAILED
    assert "CancelledError" in (gone.last_error or "")
    assert scheduler.result(after).value == 3
