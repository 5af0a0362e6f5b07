"""Enqueue inside the caller's SQLAlchemy transaction: a rollback leaves no job, a commit makes
it visible, and wake-ups run only after the commit (seen from another connection). On every SQL
store and on PostgreSQL through a transaction-pooling PgBouncer."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from ratchet_api.model import JobStatus
from ratchet_api.spi.runtime import AfterCommitResult
from ratchet_api.store.protocols import JobStore
from ratchet_core.defaults.transactions import DefaultAfterCommitRegistrar
from ratchet_core.enqueue.scheduler import SchedulerService
from tests.conftest import PGBOUNCER, SQL_BACKENDS, backend_url
from tests.engine import targets
from tests.engine.conftest import build_container, migrate


@pytest.fixture(params=[*SQL_BACKENDS, PGBOUNCER])
def sql_store_url(request: pytest.FixtureRequest) -> str:
    """Every SQL store, and PostgreSQL through a transaction-pooling PgBouncer."""
    return backend_url(request, request.param)


def application_engine(url: str) -> sa.Engine:
    """The application's own engine on the store's database. Behind a transaction pooler it is
    made as docs/stores/postgresql.md says: without Ratchet's URL option, preparing nothing."""
    parsed = sa.make_url(url)
    if "ratchet_pooler" not in parsed.query:
        return sa.create_engine(url)
    return sa.create_engine(
        parsed.difference_update_query(["ratchet_pooler"]),
        connect_args={"prepare_threshold": None},
    )


@pytest.fixture
def sql_engine(sql_store_url: str) -> Iterator[Any]:
    container = build_container(sql_store_url)
    store: JobStore = container.job_store()
    migrate(store)
    app_engine = application_engine(sql_store_url)
    yield container, app_engine
    app_engine.dispose()
    store.close()


class WakeupProbe:
    """A local wake-up listener that records whether the job was visible to another connection
    at the moment of the wake-up."""

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self.job_id: UUID | None = None
        self.seen: list[bool] = []
        self.event = threading.Event()

    def __call__(self) -> None:
        visible = self.job_id is not None and self.store.find_by_id(self.job_id) is not None
        self.seen.append(visible)
        self.event.set()


def test_rollback_leaves_no_job_and_no_wakeup(sql_engine: Any) -> None:
    container, app_engine = sql_engine
    scheduler: SchedulerService = container.scheduler()
    probe = WakeupProbe(container.job_store())
    scheduler.add_local_wakeup_listener(probe)
    with app_engine.connect() as conn:
        conn.begin()
        job_id = scheduler.job(targets.add).args(1, 2).transaction(conn).enqueue()
        assert scheduler.store.joined(conn).find_by_id(job_id) is not None
        conn.rollback()
    assert scheduler.get(job_id) is None
    time.sleep(0.1)
    assert probe.seen == []


def test_commit_on_a_connection_makes_the_job_visible_then_wakes(sql_engine: Any) -> None:
    container, app_engine = sql_engine
    scheduler: SchedulerService = container.scheduler()
    probe = WakeupProbe(container.job_store())
    scheduler.add_local_wakeup_listener(probe)
    with app_engine.connect() as conn:
        with conn.begin():
            job_id = scheduler.job(targets.add).args(1, 2).transaction(conn).enqueue()
            probe.job_id = job_id
            time.sleep(0.05)
            assert probe.seen == []  # nothing before commit
        assert probe.event.wait(5), "no wake-up after commit"
    assert probe.seen == [True]
    job = scheduler.get(job_id)
    assert job is not None and job.status is JobStatus.PENDING


def test_session_commit_and_rollback(sql_engine: Any) -> None:
    container, app_engine = sql_engine
    scheduler: SchedulerService = container.scheduler()
    probe = WakeupProbe(container.job_store())
    scheduler.add_local_wakeup_listener(probe)
    with Session(app_engine) as session:
        rolled_back = scheduler.job(targets.add).args(1, 1).transaction(session).enqueue()
        session.rollback()
        assert probe.seen == []
        committed = scheduler.enqueue_in(session, targets.add, 2, 2)
        probe.job_id = committed
        assert probe.seen == []
        session.commit()
    assert probe.event.wait(5)
    assert probe.seen == [True]
    assert scheduler.get(rolled_back) is None
    assert scheduler.get(committed) is not None


def test_bulk_enqueue_in_a_transaction_is_all_or_nothing(sql_engine: Any) -> None:
    container, app_engine = sql_engine
    scheduler: SchedulerService = container.scheduler()
    with app_engine.connect() as conn:
        conn.begin()
        ids = scheduler.enqueue_many(targets.add, [(n, n) for n in range(20)], transaction=conn)
        conn.rollback()
    assert all(scheduler.get(i) is None for i in ids)
    with app_engine.begin() as conn:
        ids = scheduler.enqueue_many(targets.add, [(n, n) for n in range(20)], transaction=conn)
    assert all(scheduler.get(i) is not None for i in ids)


def test_registrar_runs_actions_in_order_once_and_drops_them_on_rollback(
    sql_engine: Any,
) -> None:
    _, app_engine = sql_engine
    registrar = DefaultAfterCommitRegistrar()
    ran: list[str] = []
    done = threading.Event()
    assert registrar.register_after_commit(lambda: ran.append("x")) is (
        AfterCommitResult.NO_ACTIVE_TRANSACTION
    )
    with app_engine.connect() as conn:
        assert registrar.register_after_commit(lambda: ran.append("idle"), conn) is (
            AfterCommitResult.NO_ACTIVE_TRANSACTION
        )
        conn.begin()
        conn.execute(sa.text("SELECT 1"))
        for name in ("a", "b", "c"):
            result = registrar.register_after_commit(lambda n=name: ran.append(n), conn)
            assert result is AfterCommitResult.REGISTERED
        registrar.register_after_commit(done.set, conn)
        conn.commit()
        assert done.wait(5)
        assert ran == ["a", "b", "c"]
        conn.begin()
        registrar.register_after_commit(lambda: ran.append("lost"), conn)
        conn.rollback()
        conn.begin()
        conn.commit()  # a later commit must not run the dropped action
    registrar.close()
    assert ran == ["a", "b", "c"]
