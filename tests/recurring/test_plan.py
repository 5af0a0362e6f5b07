"""Misfire policies: what one round fires, decided from the definition and a given ``now``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ratchet_api.store.entities import MisfirePolicy, RecurringJobEntity
from ratchet_core.features.recurring.schedule import interval_expression, parse_schedule
from ratchet_core.features.recurring.sweeper import plan

T0 = datetime(2026, 6, 1, 3, 0, tzinfo=UTC)
GRACE = timedelta(seconds=60)


def definition(policy: MisfirePolicy, cron: str = "0 * * * *") -> RecurringJobEntity:
    return RecurringJobEntity(name="r", cron=cron, next_fire_at=T0, misfire_policy=policy)


def run(policy: MisfirePolicy, now: datetime, bound: int = 100, cron: str = "0 * * * *"):  # type: ignore[no-untyped-def]
    d = definition(policy, cron)
    return plan(d, parse_schedule(d.cron, "UTC"), now, grace=GRACE, max_catch_up=bound)


@pytest.mark.parametrize("policy", list(MisfirePolicy))
def test_on_time_slot_fires_itself_whatever_the_policy(policy: MisfirePolicy) -> None:
    p = run(policy, T0 + timedelta(seconds=30))
    assert p.slots == (T0,)
    assert p.next_fire_at == T0 + timedelta(hours=1)
    assert not p.late and p.dropped == 0


def test_skip_drops_every_missed_slot_and_continues_after_now() -> None:
    p = run(MisfirePolicy.SKIP, T0 + timedelta(hours=5, minutes=10))
    assert p.slots == ()
    assert p.next_fire_at == T0 + timedelta(hours=6)
    assert p.late and p.dropped == 6  # 03:00 .. 08:00


def test_fire_once_fires_one_catch_up_run_keyed_on_the_first_missed_slot() -> None:
    p = run(MisfirePolicy.FIRE_ONCE, T0 + timedelta(hours=5, minutes=10))
    assert p.slots == (T0,)
    assert p.next_fire_at == T0 + timedelta(hours=6)
    assert p.late and p.dropped == 5


def test_fire_all_fires_every_missed_slot_oldest_first() -> None:
    p = run(MisfirePolicy.FIRE_ALL, T0 + timedelta(hours=5, minutes=10))
    assert p.slots == tuple(T0 + timedelta(hours=h) for h in range(6))
    assert p.next_fire_at == T0 + timedelta(hours=6)
    assert p.late and p.dropped == 0


def test_fire_all_is_bounded_and_skips_the_rest() -> None:
    p = run(MisfirePolicy.FIRE_ALL, T0 + timedelta(hours=5, minutes=10), bound=2)
    assert p.slots == (T0, T0 + timedelta(hours=1))
    assert p.next_fire_at == T0 + timedelta(hours=6)
    assert p.dropped == 4


def test_slot_just_past_the_grace_is_a_misfire() -> None:
    assert not run(MisfirePolicy.SKIP, T0 + GRACE).late
    late = run(MisfirePolicy.SKIP, T0 + GRACE + timedelta(microseconds=1))
    assert late.late and late.slots == ()


def test_interval_misfire_counts_slots_arithmetically() -> None:
    p = run(
        MisfirePolicy.SKIP, T0 + timedelta(days=30), cron=interval_expression(timedelta(seconds=1))
    )
    assert p.dropped == 30 * 86400 + 1
    assert p.next_fire_at == T0 + timedelta(days=30, seconds=1)


def test_plans_of_two_racing_workers_key_the_same_slot() -> None:
    # whatever each worker's "now", both would write the job of slot T0 (one key), never two
    a = run(MisfirePolicy.FIRE_ONCE, T0 + timedelta(seconds=59))
    b = run(MisfirePolicy.FIRE_ONCE, T0 + timedelta(hours=2))
    assert a.slots[0] == b.slots[0] == T0
