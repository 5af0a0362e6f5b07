"""Engine test fixtures (shared by the scheduler side and the worker side).

``engine`` builds a ``RatchetContainer`` on the parametrized ``store_url`` with the test targets
allowed by the ClassPolicy, migrates the store, and yields the container. The PostgreSQL, MariaDB
and Mongo databases live for the whole session, so tests must not assume an empty store: select
their own jobs by id or by a unique tag.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from ratchet_api.model import PollingConfig
from ratchet_api.store.protocols import JobStore, SchemaManager
from tests.conftest import backend_url

if importlib.util.find_spec("tests.engine.worker_fixtures") is not None:  # E2's fixtures
    from tests.engine.worker_fixtures import *  # noqa: F403

TEST_ALLOWED_PACKAGES = "tests."
SLOW_POLL = PollingConfig(min_interval=timedelta(seconds=60), max_interval=timedelta(seconds=60))
"""An idle worker that polls once a minute: only a wake-up starts a job within seconds."""


def build_container(store_url: str, **overrides: Any) -> Any:
    from ratchet_core.runtime.container import RatchetContainer

    values: dict[str, Any] = {
        "store.url": store_url,
        "security.allowed_packages": TEST_ALLOWED_PACKAGES,
    }
    values.update(overrides)
    return RatchetContainer(overrides=values)


def enqueue_in_another_process(store_url: str) -> UUID:
    """Enqueue ``targets.add(2, 3)`` from a new Python process that has only the store URL
    (and ``cluster.backend=none``: any wake-up must come from the database itself)."""
    code = (
        "from ratchet_core.runtime.container import RatchetContainer\n"
        "from tests.engine import targets\n"
        f"c = RatchetContainer(overrides={{'store.url': {store_url!r}, "
        f"'security.allowed_packages': {TEST_ALLOWED_PACKAGES!r}, 'cluster.backend': 'none'}})\n"
        "print(c.scheduler().enqueue(targets.add, 2, 3))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    return UUID(out.stdout.strip().splitlines()[-1])


def coordinator_for(values: dict[str, Any]) -> Any:
    """``create_cluster_coordinator`` for these settings alone (no container, no store)."""
    from ratchet_core.cluster.backend import create_cluster_coordinator
    from ratchet_core.defaults.cluster import DefaultNodeIdentityProvider
    from ratchet_core.runtime.config import DefaultRatchetConfig

    settings = DefaultRatchetConfig.from_dict(values)
    return create_cluster_coordinator(settings, DefaultNodeIdentityProvider(settings))


def idle_worker(store_url: str, make_worker: Any, coordinator_type: type) -> tuple[Any, Any]:
    """A started worker with default cluster settings that polls once a minute (only a wake-up
    can start a job within seconds), past its first, empty poll: its container and its cluster
    coordinator, which must be a ``coordinator_type``."""
    import time

    side = build_container(store_url)
    migrate(side.job_store())
    worker = make_worker(side, polling=SLOW_POLL)
    worker.start()
    coordinator = side.cluster_coordinator()
    assert isinstance(coordinator, coordinator_type)
    assert coordinator.wait_subscribed(5)
    time.sleep(0.3)  # the first (empty) poll is over: the worker now waits 60 s
    return side, coordinator


def migrate(store: JobStore) -> None:
    manager = store.capability(SchemaManager)
    if manager is not None:
        manager.upgrade()


@pytest.fixture
def engine(store_url: str) -> Iterator[Any]:
    container = build_container(store_url)
    store: JobStore = container.job_store()
    migrate(store)
    try:
        yield container
        with contextlib.suppress(Exception):
            container.shutdown_resources()
        # the SQL store's pool: every connection given back (a leak shows up here)
        engine = getattr(store, "engine", None)
        leaked = int(getattr(getattr(engine, "pool", None), "checkedout", lambda: 0)())
        assert leaked == 0, f"{leaked} connection(s) of the store's pool left checked out"
    finally:
        with contextlib.suppress(Exception):
            container.shutdown_resources()
        store.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def sql_store_url(request: pytest.FixtureRequest) -> str:
    """SQLite and PostgreSQL: the file store and a server (tests that need both kinds)."""
    return backend_url(request, request.param)


@pytest.fixture
def sql_container(sql_store_url: str) -> Iterator[Any]:
    """A container on ``sql_store_url`` with its schema migrated; the store closed after."""
    made = build_container(sql_store_url)
    migrate(made.job_store())
    try:
        yield made
    finally:
        made.job_store().close()
