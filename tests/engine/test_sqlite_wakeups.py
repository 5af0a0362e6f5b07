"""A SQLite file wakes the workers of every process that shares it: an idle worker watches
``PRAGMA data_version`` and claims as soon as another process's insert commits, with no setting
on the enqueuing side (``cluster.backend`` auto). Updates, heartbeats and rolled-back inserts wake
nobody."""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from dependency_injector import providers

from ratchet_api.errors import ConfigurationError
from ratchet_api.model import JobStatus
from ratchet_api.store.entities import NodeEntity
from ratchet_core.cluster.coordination import DATABASE_SOURCE, sqlite_database
from ratchet_core.cluster.sqlite import SqliteFileClusterCoordinator
from ratchet_core.defaults.cluster import NoOpClusterCoordinator
from ratchet_tck.memory import InMemoryJobStore
from tests.engine import targets
from tests.engine.conftest import (
    build_container,
    coordinator_for,
    enqueue_in_another_process,
    idle_worker,
    migrate,
)


def test_the_database_file_is_read_from_the_store_url(tmp_path: Path) -> None:
    assert sqlite_database("sqlite:///ratchet.db") == os.path.realpath("ratchet.db")
    assert sqlite_database("sqlite+pysqlite:////var/lib/app.db?synchronous=normal") == (
        os.path.realpath("/var/lib/app.db")
    )
    assert sqlite_database(f"sqlite:///{tmp_path}/my%20jobs.db") == str(
        (tmp_path / "my jobs.db").resolve()
    )
    # a symlinked database: the file (and its WAL) live where the link points
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert sqlite_database(f"sqlite:///{tmp_path}/link/x.db") == str(tmp_path / "real" / "x.db")
    for no_file in (
        "sqlite://",
        "sqlite:///:memory:",
        "sqlite:///file:app.db?mode=rwc&uri=true",
        "postgresql://x/y",
        None,
        "",
    ):
        assert sqlite_database(no_file) is None


def test_auto_backend_watches_the_stores_sqlite_file_and_nothing_else(sqlite_url: str) -> None:
    auto = coordinator_for({"store.url": "sqlite:///x.db", "cluster.sqlite_check_interval": "20ms"})
    assert isinstance(auto, SqliteFileClusterCoordinator)
    assert auto.database == os.path.realpath("x.db") and auto.interval == pytest.approx(0.02)
    assert auto.database_notifies_inserts  # the scheduler publishes nothing for an insert
    for url in ("sqlite://", "mongodb://127.0.0.1:1/db"):
        assert isinstance(coordinator_for({"store.url": url}), NoOpClusterCoordinator)
    assert isinstance(
        coordinator_for({"store.url": "sqlite:///x.db", "cluster.backend": "none"}),
        NoOpClusterCoordinator,
    )
    with pytest.raises(ConfigurationError, match=r"cluster\.url"):
        coordinator_for({"store.url": "sqlite://", "cluster.backend": "sqlite"})
    # the container asks its job store, not store.url
    container = build_container(sqlite_url)
    watching = container.cluster_coordinator()
    assert isinstance(watching, SqliteFileClusterCoordinator)
    assert watching.database == sqlite_database(sqlite_url)
    container.job_store().close()
    replaced = build_container(sqlite_url)  # store.url stays a file: the store is not
    replaced.job_store.override(providers.Object(InMemoryJobStore()))
    assert isinstance(replaced.cluster_coordinator(), NoOpClusterCoordinator)


def _listening(url: str, file_events: bool) -> tuple[SqliteFileClusterCoordinator, list[Any]]:
    database = sqlite_database(url)
    assert database is not None
    listener = SqliteFileClusterCoordinator(database, "listener", file_events=file_events)
    heard: list[Any] = []
    listener.register_wakeup_listener(heard.append)
    assert listener.wait_subscribed(5)
    # Linux: the listener sleeps until the files are written; elsewhere it checks every 10 ms
    assert listener.watching_events is (file_events and sys.platform.startswith("linux"))
    return listener, heard


def _wait(predicate: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.mark.parametrize("file_events", [True, False], ids=["file-events", "checks"])
def test_an_insert_wakes_the_listener_and_other_commits_do_not(
    sqlite_url: str, file_events: bool
) -> None:
    side = build_container(sqlite_url, **{"cluster.backend": "none"})
    store = side.job_store()
    migrate(store)
    listener, heard = _listening(sqlite_url, file_events)
    scheduler = side.scheduler()

    job_id = scheduler.enqueue(targets.add, 1, 2)
    assert _wait(lambda: heard, 10), "an insert committed by another connection woke nobody"
    assert heard[0].source.node_id == DATABASE_SOURCE
    woken = len(heard)

    # commits that insert no job: an update of a job, a node heartbeat, a rolled-back insert
    engine = sa.create_engine(sqlite_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE ratchet_jobs SET priority = 7 WHERE priority = 0"))
    with engine.connect() as conn:
        conn.begin()
        scheduler.job(targets.add).args(3, 4).transaction(conn).enqueue()
        conn.rollback()
    store.upsert_heartbeat(NodeEntity(node_id="another-node"))
    time.sleep(0.5)  # many check intervals: a wake-up would have come by now
    assert len(heard) == woken, "a commit that inserted no job woke the listener"
    assert store.find_by_id(job_id) is not None

    scheduler.enqueue_many(targets.add, [(i, i) for i in range(20)])
    assert _wait(lambda: len(heard) > woken, 10), "a bulk insert woke nobody"
    listener.close()
    engine.dispose()
    store.close()


def test_the_listener_never_creates_a_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "not-yet.db"
    listener = coordinator_for({"store.url": f"sqlite:///{missing}"})
    listener.register_wakeup_listener(lambda hint: None)
    time.sleep(0.3)
    assert not listener.wait_subscribed(0.1)
    assert not missing.exists()
    # created later (the store's first migration): the listener starts watching it
    sqlite3.connect(missing).execute("CREATE TABLE ratchet_jobs (x INTEGER)").connection.close()
    assert listener.wait_subscribed(5)
    listener.close()


def test_enqueue_from_another_process_starts_an_idle_workers_job_at_once(
    sqlite_url: str, make_worker: Any
) -> None:
    # the worker polls once a minute: only the file watch can start the job within seconds
    side, coordinator = idle_worker(sqlite_url, make_worker, SqliteFileClusterCoordinator)
    job_id = enqueue_in_another_process(sqlite_url)
    store = side.job_store()
    assert _wait(lambda: store.find_by_id(job_id).status is JobStatus.SUCCEEDED, 20)
    assert coordinator.received >= 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux only")
def test_file_events_report_the_databases_files_only_and_can_be_interrupted(
    tmp_path: Path,
) -> None:
    import threading

    from ratchet_core.cluster.sqlite import DirectoryEvents

    database = tmp_path / "jobs.db"
    events = DirectoryEvents.open(str(database))
    assert events is not None
    (tmp_path / "other.log").write_text("not the database")
    assert not events.wait(0.2), "a file that is not the database's reported"
    (tmp_path / "jobs.db-wal").write_bytes(b"frame")
    assert events.wait(5), "a write to the database's WAL not reported"
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(events.wait(60)))
    waiter.start()
    events.interrupt()
    waiter.join(10)
    assert woke == [0], "interrupt() did not end the wait"
    events.close()


def test_a_database_replaced_on_disk_is_watched_again(sqlite_url: str) -> None:
    """Deleted and created anew (a reset): the listener's connection would stay on the old,
    deleted file; it reconnects to the new one."""
    if not sys.platform.startswith("linux"):
        pytest.skip("file events (inotify) are Linux only")
    side = build_container(sqlite_url, **{"cluster.backend": "none"})
    migrate(side.job_store())
    side.job_store().close()
    listener, heard = _listening(sqlite_url, True)
    path = Path(sqlite_database(sqlite_url) or "")
    for leftover in path.parent.glob(path.name + "*"):
        leftover.unlink()
    fresh = build_container(sqlite_url, **{"cluster.backend": "none"})
    migrate(fresh.job_store())
    time.sleep(0.3)  # the listener has reconnected to the new file by now
    fresh.scheduler().enqueue(targets.add, 1, 1)
    assert _wait(lambda: heard, 10), "an insert into the new file woke nobody"
    listener.close()
    fresh.job_store().close()
