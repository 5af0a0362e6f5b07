"""Workers behind PgBouncer in transaction pooling mode (``?ratchet_pooler=transaction``).

A LISTEN needs its own server session, which a transaction pooler does not keep: without a
direct ``cluster.url`` the worker says once why it only polls, and still runs every job; with
one, the database's insert trigger wakes an idle worker whose store goes through the pooler.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any
from uuid import UUID

import pytest

from ratchet_api.model import JobStatus
from ratchet_core.cluster.coordination import (
    PostgresNotifyClusterCoordinator,
    behind_transaction_pooler,
)
from ratchet_core.defaults.cluster import NoOpClusterCoordinator
from tests.engine import targets
from tests.engine.conftest import (
    SLOW_POLL,
    build_container,
    coordinator_for,
    enqueue_in_another_process,
    migrate,
)
from tests.engine.worker_fixtures import wait_for

POOLED = "postgresql+psycopg://app@pgbouncer:6432/app?ratchet_pooler=transaction"


def _succeeded(store: Any, job_id: UUID) -> bool:
    job = store.find_by_id(job_id)
    return job is not None and job.status is JobStatus.SUCCEEDED


def _fallback_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "ratchet.cluster" and "transaction-pooling PgBouncer" in r.getMessage()
    ]


def test_the_url_option_decides_whether_a_listen_can_work() -> None:
    assert behind_transaction_pooler(POOLED)
    assert behind_transaction_pooler(POOLED.replace("=transaction", "=Transaction"))
    assert not behind_transaction_pooler(POOLED.replace("=transaction", "=session"))
    assert not behind_transaction_pooler("postgresql+psycopg://app@db/app")
    assert not behind_transaction_pooler(None)


@pytest.mark.parametrize("backend", ["auto", "postgres"])
def test_without_a_direct_url_the_coordinator_polls_and_names_the_fix(
    backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="ratchet.cluster"):
        coordinator = coordinator_for({"store.url": POOLED, "cluster.backend": backend})
    assert isinstance(coordinator, NoOpClusterCoordinator)
    (message,) = _fallback_warnings(caplog)
    assert "store.url" in message and "polling" in message and "cluster.url" in message
    # a cluster.url through the pooler cannot LISTEN either
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ratchet.cluster"):
        through = coordinator_for(
            {"store.url": POOLED, "cluster.url": POOLED, "cluster.backend": backend}
        )
    assert isinstance(through, NoOpClusterCoordinator)
    (message,) = _fallback_warnings(caplog)
    assert message.startswith("cluster wake-ups: cluster.url goes through")


def test_a_worker_behind_the_pooler_without_a_direct_url_runs_jobs_by_polling(
    pgbouncer_url: str, make_worker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    container = build_container(pgbouncer_url)
    store = container.job_store()
    migrate(store)
    with caplog.at_level(logging.WARNING, logger="ratchet.cluster"):
        worker = make_worker(container)
        worker.start()
        assert isinstance(container.cluster_coordinator(), NoOpClusterCoordinator)
        # jobs from another process (only the pooled URL) and from this one, single and bulk
        ids = [enqueue_in_another_process(pgbouncer_url)]
        ids.append(container.scheduler().enqueue(targets.add, 1, 2))
        ids += container.scheduler().enqueue_many(targets.add, [(i, i) for i in range(20)])
        for job_id in ids:
            wait_for(
                functools.partial(_succeeded, store, job_id),
                30,
                f"job {job_id} to succeed by polling through PgBouncer",
            )
    assert len(_fallback_warnings(caplog)) == 1, "the fallback is said once"


def test_with_a_direct_cluster_url_the_database_wakes_an_idle_worker_behind_the_pooler(
    pgbouncer_url: str, postgres_url: str, make_worker: Any
) -> None:
    side = build_container(pgbouncer_url, **{"cluster.url": postgres_url})
    store = side.job_store()
    migrate(store)
    worker = make_worker(side, polling=SLOW_POLL)
    worker.start()
    coordinator = side.cluster_coordinator()
    assert isinstance(coordinator, PostgresNotifyClusterCoordinator)
    # the direct URL names the store's database: its insert trigger announces enqueues
    assert coordinator.database_notifies_inserts
    assert coordinator.wait_subscribed(5)
    time.sleep(0.3)  # the first (empty) poll is over: the worker now waits 60 s
    job_id = enqueue_in_another_process(pgbouncer_url)
    # well inside the 60 s poll: only the database's wake-up can have started it
    wait_for(
        functools.partial(_succeeded, store, job_id),
        20,
        "the woken worker to run the job",
    )
    assert coordinator.received >= 1
