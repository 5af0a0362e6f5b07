"""A bulk enqueue pauses the cyclic garbage collector while it builds and writes its jobs
(ratchet_core.enqueue._gc) and always leaves it as it found it: on after a bulk, on after a
refused bulk or a failed write, off when the application had switched it off."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from ratchet_api.errors import InvalidJobError
from ratchet_api.store.protocols import JobStore
from ratchet_core.enqueue._gc import PAUSE_FROM
from tests.engine import targets


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        if not was:
            gc.disable()


def test_the_collector_is_paused_during_a_bulk_and_on_after_it(
    sql_container: Any, collector_on: None
) -> None:
    scheduler = sql_container.scheduler()
    store: JobStore = sql_container.job_store()
    seen: list[bool] = []
    original = store.bulk_insert

    def watching(jobs: Any) -> Any:
        seen.append(gc.isenabled())
        return original(jobs)

    store.bulk_insert = watching  # type: ignore[method-assign]
    try:
        ids = scheduler.enqueue_many(targets.add, [(i, i) for i in range(PAUSE_FROM)])
        scheduler.enqueue_many(targets.add, [(1, 2)])
    finally:
        del store.bulk_insert
    assert seen == [False, True]  # paused for the big bulk only
    assert gc.isenabled()
    assert len(ids) == PAUSE_FROM
    assert store.find_by_id(ids[-1]) is not None


def test_a_refused_bulk_switches_the_collector_back_on(
    sql_container: Any, collector_on: None
) -> None:
    scheduler = sql_container.scheduler()
    items: list[tuple[Any, ...]] = [(i, i) for i in range(PAUSE_FROM)]
    items[-1] = (1,)  # wrong arity: refused at enqueue, naming the item
    with pytest.raises(InvalidJobError, match=f"item {PAUSE_FROM - 1}"):
        scheduler.enqueue_many(targets.add, items)
    assert gc.isenabled()


def test_a_collector_the_application_switched_off_stays_off(sql_container: Any) -> None:
    scheduler = sql_container.scheduler()
    was = gc.isenabled()
    gc.disable()
    try:
        scheduler.enqueue_many(targets.add, [(i, i) for i in range(PAUSE_FROM)])
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()
