"""A recurring definition's recent firings and misfires (features/recurring/history.py), on
every store: a definition whose due time passed while no scheduler ran (backdated in the store)
is swept by a real sweeper, or by a real worker, and its history says which round was a misfire,
how many slots got no job, and under which policy; a SKIP round leaves one never-run record."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ratchet_api.model import JobStatus
from ratchet_api.store.protocols import JobStore
from ratchet_core.features.recurring.history import History, history, misfire_count
from ratchet_core.features.recurring.settings import RecurringSettings
from ratchet_core.features.recurring.sweeper import RecurringSweeper
from tests.engine.conftest import build_container, migrate
from tests.engine.worker_fixtures import fast_settings
from tests.recurring import targets
from tests.recurring.test_cli_recurring import ratchet
from tests.recurring.test_recurring_store import backdate, rid, runs, store_url

__all__ = ["store_url"]  # the fixture, imported for these tests


def sweep(store: JobStore) -> int:
    return RecurringSweeper(store, RecurringSettings()).sweep()


def test_an_on_time_firing_is_no_misfire(recurring_engine: Any) -> None:
    scheduler = recurring_engine.scheduler()
    store = scheduler.store
    name = rid()
    scheduler.recurring(name, timedelta(hours=1), targets.tick)
    slot = backdate(store, name, timedelta(seconds=5))
    assert sweep(store) >= 1
    seen = history(store, name)
    assert seen.misfires == 0
    [firing] = seen.firings
    assert firing.due_at == slot and not firing.misfire and not firing.skipped
    assert firing.status is JobStatus.PENDING


def test_fire_once_after_downtime_is_one_late_firing_standing_for_the_missed_slots(
    recurring_engine: Any,
) -> None:
    scheduler = recurring_engine.scheduler()
    store = scheduler.store
    name = rid()
    scheduler.recurring(name, timedelta(hours=1), targets.tick, misfire="fire_once")
    first = backdate(store, name, timedelta(hours=5, minutes=30))  # 6 slots missed
    sweep(store)
    seen = history(store, name)
    assert seen.misfires == 1
    [firing] = seen.firings
    assert firing.misfire and not firing.skipped and firing.status is JobStatus.PENDING
    assert firing.due_at == first and firing.missed == 5 and firing.policy == "FIRE_ONCE"
    assert firing.late_by > timedelta(hours=5)


def test_skip_leaves_one_never_run_record_per_misfire_round(recurring_engine: Any) -> None:
    scheduler = recurring_engine.scheduler()
    store = scheduler.store
    name = rid()
    scheduler.recurring(name, timedelta(hours=1), targets.tick, misfire="skip")
    first = backdate(store, name, timedelta(hours=5, minutes=30))
    assert sweep(store) == 0  # no job to run
    assert sweep(store) == 0  # and nothing due any more: the round is recorded once
    seen = history(store, name)
    assert seen.misfires == 1
    [record] = seen.firings
    assert record.skipped and record.misfire and record.missed == 6 and record.policy == "SKIP"
    assert record.status is JobStatus.CANCELLED and record.due_at == first
    assert record.last_error is not None and "6 slot(s)" in record.last_error
    # a later misfire round is counted too
    backdate(store, name, timedelta(hours=2, minutes=30))
    sweep(store)
    assert misfire_count(store, name) == 2
    assert [f.missed for f in history(store, name).firings] == [3, 6]


def test_racing_sweepers_record_a_skip_round_once(recurring_engine: Any) -> None:
    scheduler = recurring_engine.scheduler()
    store = scheduler.store
    name = rid()
    scheduler.recurring(name, timedelta(hours=1), targets.tick, misfire="skip")
    backdate(store, name, timedelta(hours=2, minutes=30))
    definition = scheduler.recurring_jobs.require(name)
    now = store.server_now()
    # both planned the same round from the same read: one record, one mark
    a = RecurringSweeper(store, RecurringSettings())
    b = RecurringSweeper(store, RecurringSettings())
    a.fire(definition, now)
    b.fire(definition, now)
    assert len(runs(store, name)) == 1
    assert misfire_count(store, name) == 1


def wait_for(store: JobStore, name: str, done: Any) -> History:
    deadline = time.monotonic() + 60
    while True:
        seen = history(store, name)
        if done(seen):
            return seen
        assert time.monotonic() < deadline, f"no such history within 60 s: {seen}"
        time.sleep(0.05)


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
def test_a_worker_started_after_downtime_records_the_misfire(recurring_engine: Any) -> None:
    scheduler = recurring_engine.scheduler()
    store = scheduler.store
    name = rid()
    scheduler.recurring(name, timedelta(hours=1), targets.tick, "w", misfire="fire_once")
    backdate(store, name, timedelta(hours=3, minutes=30))  # no scheduler ran for 3.5 hours
    worker = recurring_engine.worker(worker_settings=fast_settings())
    worker.start()
    try:
        seen = wait_for(
            store,
            name,
            lambda h: h.firings and h.firings[0].status is JobStatus.SUCCEEDED,
        )
    finally:
        worker.stop(timeout=10)
    assert seen.misfires == 1
    [firing] = seen.firings
    assert firing.misfire and firing.missed == 3 and firing.policy == "FIRE_ONCE"


def test_the_cli_lists_misfires_and_the_last_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    container = build_container(url)
    store = container.job_store()
    migrate(store)
    try:
        scheduler = container.scheduler()
        scheduler.recurring("dropped", timedelta(hours=1), targets.tick, misfire="skip")
        scheduler.recurring("caught-up", timedelta(hours=1), targets.tick, misfire="fire_once")
        scheduler.recurring("quiet", timedelta(hours=1), targets.tick)
        backdate(store, "dropped", timedelta(hours=3, minutes=30))
        backdate(store, "caught-up", timedelta(hours=3, minutes=30))
        sweep(store)
    finally:
        store.close()
    lines = ratchet("recurring", "list", "--json", "--url", url)
    assert lines.returncode == 0, lines.stderr
    records = {r["id"]: r for r in map(json.loads, lines.stdout.splitlines())}
    assert records["dropped"]["misfires"] == 1
    assert records["dropped"]["last_run"]["skipped"] is True
    assert records["dropped"]["last_run"]["missed"] == 4
    assert records["caught-up"]["misfires"] == 1
    assert records["caught-up"]["last_run"]["missed"] == 3
    assert records["caught-up"]["last_run"]["status"] == "PENDING"
    assert records["quiet"]["misfires"] == 0 and records["quiet"]["last_run"] is None
    table = ratchet("recurring", "list", "--url", url)
    assert table.returncode == 0, table.stderr
    assert "misfires" in table.stdout and "4 slot(s) skipped" in table.stdout
    shown = ratchet("recurring", "show", "caught-up", "--url", url)
    assert shown.returncode == 0, shown.stderr
    assert "3 slot(s) dropped" in shown.stdout
