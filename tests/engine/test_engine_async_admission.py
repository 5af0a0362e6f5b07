"""An ``async def`` job is admitted off its event loop (issue 23): while one async job waits on
the store for its resource permit, the other async jobs keep running.

The permit store call is held open by a subclass of the TCK memory store (a slow database
cannot be produced on the memory store); the test waits on events and job states only."""

from __future__ import annotations

import threading
from datetime import timedelta

from dependency_injector import providers

from ratchet_api.model import JobStatus
from ratchet_tck.memory import InMemoryJobStore
from tests.engine import targets
from tests.engine.conftest import build_container
from tests.engine.worker_fixtures import fast_settings, wait_for


class _SlowPermits(InMemoryJobStore):
    """``try_acquire_permit`` blocks until ``answer`` is set (``entered`` tells it started)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.answer = threading.Event()

    def try_acquire_permit(
        self, resource_key: str, holder: str, limit: int, ttl: timedelta
    ) -> bool:
        self.entered.set()
        assert self.answer.wait(60), "the test never answered the permit request"
        return super().try_acquire_permit(resource_key, holder, limit, ttl)


def test_an_async_job_waiting_for_its_permit_does_not_delay_other_async_jobs() -> None:
    store = _SlowPermits()
    container = build_container("sqlite:///unused.db", **{"cluster.backend": "none"})
    container.job_store.override(providers.Object(store))
    scheduler = container.scheduler()
    worker = container.worker(worker_settings=fast_settings(concurrency=4))
    worker.start()
    try:
        gated = scheduler.job(targets.async_add).args(1, 1).resource("slow-db", permits=1).enqueue()
        assert store.entered.wait(30), "the permitted job never asked for its permit"
        # the permit request is now held open by the store; the loop must stay free
        others = [scheduler.enqueue(targets.async_add, n, n) for n in range(3)]

        def others_done() -> bool:
            return all(store.find_by_id(i).status is JobStatus.SUCCEEDED for i in others)  # type: ignore[union-attr]

        done = wait_for(others_done, 30, "the other async jobs to finish")
        assert done
        assert store.find_by_id(gated).status is JobStatus.RUNNING  # type: ignore[union-attr]
        store.answer.set()
        wait_for(
            lambda: store.find_by_id(gated).status is JobStatus.SUCCEEDED,  # type: ignore[union-attr]
            30,
            "the permitted job to finish",
        )
    finally:
        store.answer.set()
        worker.stop(timeout=10)
        container.job_store.reset_override()
