"""Declaring, managing and firing recurring jobs on every store (SQLite, PostgreSQL, MariaDB,
Mongo, and PostgreSQL through PgBouncer in transaction pooling mode). Misfires use definitions backdated in the store and a given clock; no sleeps."""

from __future__ import annotations

import itertools
import logging
import threading
import uuid
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import attrs
import pytest

from ratchet_api.errors import (
    InvalidJobError,
    InvalidScheduleError,
    InvalidTargetError,
    RecurringJobNotFoundError,
)
from ratchet_api.model import JobPriority, JobStatus, JobType
from ratchet_api.store.entities import JobEntity, JobQuery, MisfirePolicy
from ratchet_api.store.protocols import JobQueryStore, JobStore, RecurringJobStore
from ratchet_core.features.recurring.schedule import parse_schedule
from ratchet_core.features.recurring.settings import RecurringSettings
from ratchet_core.features.recurring.sweeper import RecurringSweeper, plan
from ratchet_core.features.recurring.template import decode_template, job_for, run_tag, slot_key
from tests.conftest import ALL_BACKENDS, PGBOUNCER, backend_url
from tests.recurring import targets


@pytest.fixture(params=[*ALL_BACKENDS, PGBOUNCER])
def store_url(request: pytest.FixtureRequest) -> str:
    """Every store, and PostgreSQL through a transaction-pooling PgBouncer."""
    return backend_url(request, request.param)


def rid() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def runs(store: JobStore, recurring_id: str) -> list[JobEntity]:
    queries = store.capability(JobQueryStore)
    assert queries is not None
    return queries.search_jobs(JobQuery(tag=run_tag(recurring_id), limit=10_000))


def backdate(store: JobStore, recurring_id: str, by: timedelta) -> datetime:
    """Move the definition's next fire time to the slot ``by`` ago (as if the cluster was down)."""
    rec = store.capability(RecurringJobStore)
    assert rec is not None
    current = rec.find_recurring(recurring_id)
    assert current is not None
    schedule = parse_schedule(current.cron, current.timezone)
    now = store.server_now()
    slot = schedule.next_after(now - by - timedelta(microseconds=1), now - by)
    rec.save_recurring(attrs.evolve(current, next_fire_at=slot))
    return slot


def sweeper(store: JobStore, **settings: Any) -> RecurringSweeper:
    return RecurringSweeper(store, RecurringSettings(**settings))


# ------------------------------------------------------------ declaring


def test_declare_is_create_or_update_and_idempotent(recurring_engine: Any) -> None:
    scheduler = recurring_engine.scheduler()
    name = rid()
    first = scheduler.recurring(name, "0 3 * * *", targets.tick, "a", tz="Europe/Berlin")
    assert first.cron == "0 3 * * *" and first.timezone == "Europe/Berlin"
    assert first.target == "tests.recurring.targets:tick"
    assert first.next_fire_at > scheduler.store.server_now()
    again = scheduler.recurring(name, "0 3 * * *", targets.tick, "a", tz="Europe/Berlin")
    assert again == first
    changed = scheduler.recurring(
        name, "0 3 * * *", targets.tick, "b", tz="Europe/Berlin", priority="high", tags=["x"]
    )
    assert changed.next_fire_at == first.next_fire_at  # same schedule: no slot moved
    assert changed.priority is JobPriority.HIGH
    assert decode_template(changed).tags == ("x",)
    moved = scheduler.recurring(name, "0 4 * * *", targets.tick, "b", tz="Europe/Berlin")
    assert moved.next_fire_at != first.next_fire_at
    assert scheduler.recurring_jobs.get(name) == moved
    assert name in [d.name for d in scheduler.recurring_jobs.list()]


def test_declaration_errors_are_raised_at_declaration(recurring_engine: Any) -> None:
    scheduler = recurring_engine.scheduler()
    with pytest.raises(InvalidScheduleError, match="unknown time zone"):
        scheduler.recurring(rid(), "0 3 * * *", targets.tick, tz="Europe/Atlantis")
    with pytest.raises(InvalidScheduleError, match="invalid cron"):
        scheduler.recurring(rid(), "0 25 * * *", targets.tick)
    with pytest.raises(InvalidScheduleError, match="misfire policy"):
        scheduler.recurring(rid(), "@daily", targets.tick, misfire="sometimes")
    with pytest.raises(InvalidTargetError):
        scheduler.recurring(rid(), "@daily", lambda: None)
    with pytest.raises(InvalidJobError, match="unknown recurring option"):
        scheduler.recurring(rid(), "@daily", targets.tick, retries=3)
    with pytest.raises(InvalidJobError, match="recurring id"):
        scheduler.recurring("has space", "@daily", targets.tick)
    with pytest.raises(InvalidJobError, match="max_instances"):
        scheduler.recurring(rid(), "@daily", targets.tick, max_instances=0)


def test_pause_resume_delete_trigger(recurring_engine: Any) -> None:
    scheduler = recurring_engine.scheduler()
    jobs = scheduler.recurring_jobs
    name = rid()
    scheduler.recurring(name, "@daily", targets.tick, every=None, max_retries=7)
    assert jobs.pause(name) is True and jobs.pause(name) is False
    assert jobs.get(name).enabled is False
    job_id = jobs.trigger_now(name)  # works while paused, consumes no slot
    job = scheduler.get(job_id)
    assert job.recurring_name == name and job.max_retries == 7
    assert job.job_type is JobType.RECURRING and job.idempotency_key is None
    assert jobs.resume(name) is True and jobs.get(name).enabled is True
    assert jobs.delete(name) is True and jobs.get(name) is None
    for call in (jobs.pause, jobs.resume, jobs.trigger_now):
        with pytest.raises(RecurringJobNotFoundError, match=name):
            call(name)
    assert jobs.delete(name) is False


def test_redeclaring_keeps_a_paused_definition_paused(recurring_engine: Any) -> None:
    scheduler = recurring_engine.scheduler()
    name = rid()
    scheduler.recurring(name, "@hourly", targets.tick)
    scheduler.recurring_jobs.pause(name)
    scheduler.recurring(name, "@hourly", targets.tick, priority="low")
    assert scheduler.recurring_jobs.get(name).enabled is False


# ------------------------------------------------------------ firing


def test_due_slot_fires_one_job_carrying_its_slot(recurring_engine: Any) -> None:
    scheduler = recurring_engine.scheduler()
    store = scheduler.store
    name = rid()
    scheduler.recurring(
        name, timedelta(minutes=1), targets.tick, "x", tags=["nightly"], execution_target="ops"
    )
    slot = backdate(store, name, timedelta(seconds=10))
    assert sweeper(store).sweep() >= 1
    [job] = runs(store, name)
    assert job.scheduled_at == slot
    assert job.idempotency_key == slot_key(name, slot)
    assert set(job.tags) == {"nightly", run_tag(name)}
    assert job.execution_target == "ops" and job.status is JobStatus.PENDING
    stored = store.capability(RecurringJobStore).find_recurring(name)
    assert stored.last_fired_at == slot and stored.next_fire_at == slot + timedelta(minutes=1)
    assert sweeper(store).sweep() == 0  # nothing due any more


@pytest.mark.parametrize(
    ("policy", "expected"),
    [(MisfirePolicy.SKIP, 0), (MisfirePolicy.FIRE_ONCE, 1), (MisfirePolicy.FIRE_ALL, 6)],
)
def test_misfire_policies_after_downtime(
    recurring_engine: Any, policy: MisfirePolicy, expected: int
) -> None:
    scheduler = recurring_engine.scheduler()
    store = scheduler.store
    name = rid()
    # an interval anchored at the backdated time: exactly 6 missed slots whatever the clock
    scheduler.recurring(name, timedelta(hours=1), targets.tick, misfire=policy.value.lower())
    first = backdate(store, name, timedelta(hours=5, minutes=30))
    sweeper(store).sweep()
    # a SKIP round leaves one CANCELLED record that never runs (history.py), no job to run
    fired = [j for j in runs(store, name) if j.status is not JobStatus.CANCELLED]
    assert len(fired) == expected
    if fired:
        assert min(j.scheduled_at for j in fired) == first
    stored = store.capability(RecurringJobStore).find_recurring(name)
    assert stored.next_fire_at > store.server_now()


def test_fire_all_is_bounded_by_max_catch_up(recurring_engine: Any) -> None:
    scheduler = recurring_engine.scheduler()
    store = scheduler.store
    name = rid()
    scheduler.recurring(name, "0 * * * *", targets.tick, misfire="fire_all")
    backdate(store, name, timedelta(hours=20, minutes=30))
    sweeper(store, max_catch_up=3).sweep()
    assert len(runs(store, name)) == 3


def test_max_instances_skips_a_slot_while_the_previous_run_is_unfinished(
    recurring_engine: Any,
) -> None:
    scheduler = recurring_engine.scheduler()
    store = scheduler.store
    name = rid()
    scheduler.recurring(name, timedelta(seconds=1), targets.tick, max_instances=1)
    backdate(store, name, timedelta(seconds=5))
    sweeper(store).sweep()
    # one pending run: the other due slots were skipped, not queued behind it
    assert len(runs(store, name)) == 1
    stored = store.capability(RecurringJobStore).find_recurring(name)
    assert stored.next_fire_at > store.server_now() - timedelta(seconds=1)


def test_a_crash_between_the_job_write_and_the_advance_neither_loses_nor_doubles(
    recurring_engine: Any,
) -> None:
    scheduler = recurring_engine.scheduler()
    store = scheduler.store
    name = rid()
    scheduler.recurring(name, timedelta(minutes=1), targets.tick)
    slot = backdate(store, name, timedelta(seconds=5))
    rec = store.capability(RecurringJobStore)
    definition = rec.find_recurring(name)
    # what a worker that died right after writing the slot's job left behind
    store.bulk_insert([job_for(definition, decode_template(definition), slot=slot, now=slot)])
    assert rec.find_recurring(name).next_fire_at == slot
    sweeper(store).sweep()
    [job] = runs(store, name)
    assert job.scheduled_at == slot
    assert rec.find_recurring(name).next_fire_at == slot + timedelta(minutes=1)


def test_racing_sweepers_fire_every_slot_exactly_once(
    recurring_engine: Any, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = recurring_engine.scheduler()
    store = scheduler.store
    names = [rid() for _ in range(3)]
    for name in names:
        scheduler.recurring(name, timedelta(seconds=1), targets.tick, misfire="fire_all")
        backdate(store, name, timedelta(seconds=40))
    caplog.set_level(logging.WARNING, logger="ratchet.recurring")
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def race() -> None:
        try:
            s = sweeper(store, misfire_grace=timedelta(minutes=5))
            barrier.wait()
            for _ in range(3):
                s.sweep()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=race) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    # losing a race is normal, not an error: nothing was logged as a failed fire
    assert not [r for r in caplog.records if "could not fire" in r.getMessage()]
    for name in names:
        fired = runs(store, name)
        slots = Counter(j.scheduled_at for j in fired)
        assert max(slots.values()) == 1, "a slot fired twice"
        ordered = sorted(slots)
        assert len(ordered) >= 40
        gaps = {b - a for a, b in itertools.pairwise(ordered)}
        assert gaps == {timedelta(seconds=1)}, "a slot was skipped"


def test_plan_is_the_one_the_sweeper_applies(recurring_engine: Any) -> None:
    """The store-backed sweep and the pure plan agree (same slots for the same clock)."""
    scheduler = recurring_engine.scheduler()
    store = scheduler.store
    name = rid()
    scheduler.recurring(name, "*/10 * * * *", targets.tick, misfire="fire_all")
    backdate(store, name, timedelta(hours=1, minutes=5))
    definition = store.capability(RecurringJobStore).find_recurring(name)
    now = store.server_now()
    expected = plan(
        definition,
        parse_schedule(definition.cron, "UTC"),
        now,
        grace=timedelta(seconds=60),
        max_catch_up=100,
    )
    s = RecurringSweeper(store, RecurringSettings(), clock=lambda: now)
    s.fire(definition)
    assert sorted(j.scheduled_at for j in runs(store, name)) == list(expected.slots)
