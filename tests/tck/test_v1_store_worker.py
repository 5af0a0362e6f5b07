"""A real worker runs jobs on the frozen store SPI 1.0 store, opened the way users open a store
(``store.url`` -> its ``ratchet.stores`` entry point -> ``open_store``, which adapts it): jobs
succeed, retry and dead-letter; a dead node's claim is recovered with its attempt counted (the
1.0 guarantee); the newer features are reported unavailable (log, refused workflow steps)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from ratchet_api.errors import UnsupportedCapabilityError
from ratchet_api.model import JobPriority, JobStatus
from ratchet_api.store.entities import NodeEntity
from ratchet_core.runtime.store_compat import SpiCompatStore, spi_status
from tests.engine import targets
from tests.engine.conftest import build_container
from tests.engine.worker_fixtures import make_worker, wait_for
from tests.tck.v1_support import v1_entry_point

__all__ = ["make_worker"]  # the fixture, imported for this module


@pytest.fixture
def v1_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> Iterator[Any]:
    v1_entry_point(monkeypatch)
    container = build_container(
        f"v1sqlite:///{tmp_path / 'worker.db'}", **{"cluster.backend": "none"}
    )
    with caplog.at_level(logging.WARNING, logger="ratchet_core.runtime.store_compat"):
        store = container.job_store()
    assert "implements store SPI 1.0 (this Ratchet: 1.1)" in caplog.text
    yield container
    container.shutdown_resources()
    store.close()


def _status(container: Any, job_id: UUID) -> Any:
    job = container.job_store().find_by_id(job_id)
    return (
        job if job is not None and job.status in (JobStatus.SUCCEEDED, JobStatus.FAILED) else None
    )


def test_a_worker_runs_succeeds_retries_and_dead_letters_on_a_1_0_store(
    v1_container: Any, make_worker: Any
) -> None:
    store = v1_container.job_store()
    assert isinstance(store, SpiCompatStore)  # the worker gets the current SPI
    scheduler = v1_container.scheduler()
    added = scheduler.job(targets.add).args(2, 3).priority(42).enqueue()
    flaky = scheduler.job(targets.flaky).args(f"v1-{added}", 1).backoff(0.05).enqueue()
    failing = scheduler.job(targets.fail_always).args("boom").max_retries(0).enqueue()
    make_worker(v1_container).start()
    done = {
        j: wait_for(lambda j=j: _status(v1_container, j), 30, f"job {j}")
        for j in (added, flaky, failing)
    }

    assert done[added].status is JobStatus.SUCCEEDED and scheduler.result(added).value == 5
    assert done[added].attempt == 1
    assert done[added].priority is JobPriority.HIGH  # 42 reached the 1.0 store as HIGH
    assert done[flaky].status is JobStatus.SUCCEEDED and done[flaky].attempt == 2
    assert done[failing].status is JobStatus.FAILED and "boom" in (done[failing].last_error or "")


def test_a_dead_nodes_claim_is_recovered_with_its_attempt_counted(
    v1_container: Any, make_worker: Any
) -> None:
    store = v1_container.job_store()
    job_id = v1_container.scheduler().enqueue(targets.add, 1, 1)
    store.upsert_heartbeat(NodeEntity(node_id="ghost"))
    claimed = store.claim_next_batch("ghost", 1)
    assert [j.id for j in claimed] == [job_id]  # claimed by a node that then dies
    make_worker(v1_container).start()  # node timeout 2 s: the ghost is found dead, its job reset
    done = wait_for(lambda: _status(v1_container, job_id), 60, "the recovered job to finish")
    assert done.status is JobStatus.SUCCEEDED
    assert done.attempt == 2  # 1.0 keeps no started marks: the dead node's claim is charged


def test_the_newer_features_are_reported_unavailable(v1_container: Any) -> None:
    store = v1_container.job_store()
    lost = " ".join(d.lost for d in spi_status(store).disabled)
    assert "workflow steps" in lost and "started marks" in lost
    with pytest.raises(UnsupportedCapabilityError, match="WorkflowConditionStore"):
        v1_container.scheduler().job(targets.add).args(1, 2).then(targets.add, 3, 4).enqueue()
