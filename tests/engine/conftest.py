"""Engine test fixtures (shared by the scheduler side and the worker side).

``engine`` builds a ``RatchetContainer`` on the parametrized ``store_url`` with the test targets
allowed by the ClassPolicy, migrates the store, and yields the container. The PostgreSQL, MariaDB
and Mongo databases live for the whole session, so tests must not assume an empty store: select
their own jobs by id or by a unique tag.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest

from ratchet_api.store.protocols import JobStore, SchemaManager

if importlib.util.find_spec("tests.engine.worker_fixtures") is not None:  # E2's fixtures
    from tests.engine.worker_fixtures import *  # noqa: F403

TEST_ALLOWED_PACKAGES = "tests."


def build_container(store_url: str, **overrides: Any) -> Any:
    from ratchet_core.container import RatchetContainer

    values: dict[str, Any] = {
        "store.url": store_url,
        "security.allowed_packages": TEST_ALLOWED_PACKAGES,
    }
    values.update(overrides)
    return RatchetContainer(overrides=values)


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
