"""PostgreSQL wakes the workers itself (migration 0011's insert trigger), so an enqueue from a
process with no Ratchet setting but the store URL starts an idle worker's job at once, and a
rolled-back enqueue wakes nobody. ``cluster.backend`` defaults to that native mechanism."""

from __future__ import annotations

import time
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from ratchet_api.model import JobStatus
from ratchet_core.cluster.coordination import (
    DATABASE_SOURCE,
    PostgresNotifyClusterCoordinator,
)
from ratchet_core.defaults.cluster import NoOpClusterCoordinator
from tests.engine import targets
from tests.engine.conftest import (
    build_container,
    coordinator_for,
    enqueue_in_another_process,
    idle_worker,
    migrate,
)


def test_auto_backend_is_the_stores_native_mechanism(postgres_url: str) -> None:
    assert isinstance(coordinator_for({"store.url": "sqlite://"}), NoOpClusterCoordinator)
    native = coordinator_for({"store.url": postgres_url})
    assert isinstance(native, PostgresNotifyClusterCoordinator)
    assert native.database_notifies_inserts
    native.close()
    # wake-ups through another database: that database's trigger does not see our inserts
    elsewhere = coordinator_for(
        {"store.url": postgres_url, "cluster.url": postgres_url + "_other_cluster"}
    )
    assert isinstance(elsewhere, PostgresNotifyClusterCoordinator)
    assert not elsewhere.database_notifies_inserts
    elsewhere.close()
    assert isinstance(
        coordinator_for({"store.url": postgres_url, "cluster.backend": "none"}),
        NoOpClusterCoordinator,
    )


def _idle_worker(postgres_url: str, make_worker: Any) -> tuple[Any, Any]:
    return idle_worker(postgres_url, make_worker, PostgresNotifyClusterCoordinator)


def _wait_status(store: Any, job_id: UUID, status: JobStatus, seconds: float) -> JobStatus:
    deadline = time.monotonic() + seconds
    while True:
        job = store.find_by_id(job_id)
        assert job is not None
        if job.status is status or time.monotonic() > deadline:
            return job.status  # type: ignore[no-any-return]
        time.sleep(0.02)


def test_enqueue_from_a_process_without_cluster_settings_wakes_an_idle_worker(
    postgres_url: str, make_worker: Any
) -> None:
    side, coordinator = _idle_worker(postgres_url, make_worker)
    # Another process: only the store URL, and Python-side publishing explicitly off, so the
    # wake-up can only come from the database.
    job_id = enqueue_in_another_process(postgres_url)
    store = side.job_store()
    assert _wait_status(store, job_id, JobStatus.SUCCEEDED, 10) is JobStatus.SUCCEEDED
    assert coordinator.received >= 1
    side.cluster_coordinator().close()


def test_bulk_and_transactional_enqueues_notify_at_commit_and_a_rollback_wakes_nobody(
    postgres_url: str, make_worker: Any
) -> None:
    side, coordinator = _idle_worker(postgres_url, make_worker)
    producer = build_container(postgres_url, **{"cluster.backend": "none"})
    scheduler, store = producer.scheduler(), producer.job_store()

    before = coordinator.received
    engine = sa.create_engine(postgres_url)
    with engine.connect() as conn:
        conn.begin()
        rolled_back = scheduler.job(targets.add).args(1, 1).transaction(conn).enqueue()
        conn.rollback()
    time.sleep(1.0)
    assert coordinator.received == before, "a rolled-back insert must not wake anybody"
    assert store.find_by_id(rolled_back) is None

    ids = scheduler.enqueue_many(targets.add, [(i, i) for i in range(50)])
    for job_id in (ids[0], ids[-1]):
        assert _wait_status(store, job_id, JobStatus.SUCCEEDED, 10) is JobStatus.SUCCEEDED
    assert coordinator.received >= before + 1
    engine.dispose()
    store.close()
    side.cluster_coordinator().close()


def test_the_triggers_message_names_the_database_as_its_source(postgres_url: str) -> None:
    side = build_container(postgres_url)
    migrate(side.job_store())
    listener = coordinator_for({"store.url": postgres_url})
    heard: list[Any] = []
    listener.register_wakeup_listener(heard.append)
    assert listener.wait_subscribed(5)
    producer = build_container(postgres_url, **{"cluster.backend": "none"})
    producer.scheduler().job(targets.add).args(1, 2).execution_target("gpu").enqueue()
    deadline = time.monotonic() + 5
    while not heard and time.monotonic() < deadline:
        time.sleep(0.02)
    listener.close()
    assert heard, "no wake-up from the database"
    assert heard[0].source.node_id == DATABASE_SOURCE
    assert heard[0].execution_target == "gpu"
    producer.job_store().close()
    side.job_store().close()
