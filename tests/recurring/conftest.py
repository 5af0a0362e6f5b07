"""Recurring-job fixtures: a migrated container per backend (``recurring_engine``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from ratchet_api.store.protocols import JobStore
from tests.engine.conftest import build_container, migrate


@pytest.fixture
def recurring_engine(store_url: str) -> Iterator[Any]:
    container = build_container(store_url)
    store: JobStore = container.job_store()
    migrate(store)
    try:
        yield container
    finally:
        with contextlib.suppress(Exception):
            container.shutdown_resources()
        store.close()
