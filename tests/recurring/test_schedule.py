"""Fire times: cron fields, aliases, 6 fields, intervals and daylight saving time (pure)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from ratchet_api.errors import InvalidJobError, InvalidScheduleError
from ratchet_core.features.recurring.schedule import interval_expression, parse_schedule

BERLIN = ZoneInfo("Europe/Berlin")


def fires(expression: str, tz: str, start: datetime, count: int) -> list[datetime]:
    schedule = parse_schedule(expression, tz)
    out: list[datetime] = []
    at = start
    for _ in range(count):
        at = schedule.next_after(at, out[-1] if out else None)
        out.append(at)
    return out


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def test_five_fields_fire_on_the_zone_wall_clock() -> None:
    got = fires("0 3 * * *", "Europe/Berlin", utc(2026, 1, 10), 2)
    assert [t.astimezone(BERLIN).hour for t in got] == [3, 3]
    assert got[0] == utc(2026, 1, 10, 2)  # 03:00 CET is 02:00 UTC


def test_six_fields_have_the_seconds_first() -> None:
    assert fires("*/20 * * * * *", "UTC", utc(2026, 1, 1), 3) == [
        utc(2026, 1, 1, 0, 0, 20),
        utc(2026, 1, 1, 0, 0, 40),
        utc(2026, 1, 1, 0, 1, 0),
    ]


@pytest.mark.parametrize(
    ("alias", "expected"),
    [
        ("@daily", utc(2026, 5, 2)),
        ("@midnight", utc(2026, 5, 2)),
        ("@hourly", utc(2026, 5, 1, 13)),
        ("@weekly", utc(2026, 5, 3)),
        ("@monthly", utc(2026, 6, 1)),
        ("@yearly", utc(2027, 1, 1)),
        ("@annually", utc(2027, 1, 1)),
    ],
)
def test_aliases(alias: str, expected: datetime) -> None:
    assert fires(alias, "UTC", utc(2026, 5, 1, 12, 30), 1) == [expected]


def test_next_fire_is_strictly_after_the_instant() -> None:
    assert fires("0 12 * * *", "UTC", utc(2026, 5, 1, 12), 1) == [utc(2026, 5, 2, 12)]


def test_spring_forward_slot_in_the_skipped_hour_fires_once_at_the_change() -> None:
    # 2026-03-29: Berlin clocks jump from 02:00 CET to 03:00 CEST (01:00 UTC); 02:30 never exists
    got = fires("30 2 * * *", "Europe/Berlin", utc(2026, 3, 28, 12), 3)
    assert got == [utc(2026, 3, 29, 1), utc(2026, 3, 30, 0, 30), utc(2026, 3, 31, 0, 30)]
    assert got[0].astimezone(BERLIN).strftime("%H:%M %Z") == "03:00 CEST"


def test_autumn_repeated_hour_fires_a_daily_slot_once() -> None:
    # 2026-10-25: Berlin clocks fall back from 03:00 CEST to 02:00 CET; 02:30 happens twice
    got = fires("30 2 * * *", "Europe/Berlin", utc(2026, 10, 24, 12), 3)
    assert got == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30), utc(2026, 10, 27, 1, 30)]


def test_hourly_follows_elapsed_time_across_both_changes() -> None:
    spring = fires("30 * * * *", "Europe/Berlin", utc(2026, 3, 28, 23), 4)
    assert spring == [
        utc(2026, 3, 28, 23, 30),
        utc(2026, 3, 29, 0, 30),
        utc(2026, 3, 29, 1, 30),
        utc(2026, 3, 29, 2, 30),
    ]
    autumn = fires("30 * * * *", "Europe/Berlin", utc(2026, 10, 24, 23), 4)
    # the repeated hour runs in both passes: one run per real hour, none twice
    assert autumn == [
        utc(2026, 10, 24, 23, 30),
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 25, 1, 30),
        utc(2026, 10, 25, 2, 30),
    ]
    assert len(set(autumn)) == len(autumn)


def test_day_across_autumn_change_has_each_slot_once_and_in_order() -> None:
    got = fires("*/30 * * * *", "Europe/Berlin", utc(2026, 10, 24, 22), 48 + 2)
    assert got == sorted(set(got))
    assert all(b - a == timedelta(minutes=30) for a, b in itertools.pairwise(got))


def test_new_york_midnight_stays_local_midnight_across_the_change() -> None:
    ny = ZoneInfo("America/New_York")
    got = fires("@daily", "America/New_York", utc(2026, 10, 31, 12), 3)
    assert [t.astimezone(ny).strftime("%d %H:%M") for t in got] == [
        "01 00:00",
        "02 00:00",
        "03 00:00",
    ]
    assert got[1] - got[0] == timedelta(hours=25)


def test_interval_counts_from_the_anchor() -> None:
    schedule = parse_schedule(interval_expression(timedelta(seconds=90)), "UTC")
    anchor = utc(2026, 1, 1)
    assert schedule.next_after(anchor, anchor) == utc(2026, 1, 1, 0, 1, 30)
    assert schedule.next_after(utc(2026, 1, 1, 0, 10), anchor) == utc(2026, 1, 1, 0, 10, 30)
    # a new definition's first slot is on the epoch-aligned grid (racing declarers agree)
    assert schedule.next_after(utc(2026, 1, 1, 0, 0, 5), None) == utc(2026, 1, 1, 0, 1, 30)


@pytest.mark.parametrize(
    ("expression", "tz", "fragment"),
    [
        ("61 * * * *", "UTC", "invalid cron"),
        ("* * *", "UTC", "3 fields"),
        ("0 0 0 0 0 0 0", "UTC", "7 fields"),
        ("@fortnightly", "UTC", "unknown cron alias"),
        ("0 0 30 2 *", "UTC", "no fire time"),
        ("0 3 * * *", "Mars/Olympus", "unknown time zone"),
        ("0 3 * * *", "../etc/passwd", "IANA"),
        ("", "UTC", "non-empty"),
        ("@every 0.5s", "UTC", "at least 1 second"),
    ],
)
def test_bad_schedules_are_refused_with_a_named_reason(
    expression: str, tz: str, fragment: str
) -> None:
    with pytest.raises(InvalidScheduleError, match=fragment) as info:
        parse_schedule(expression, tz)
    assert isinstance(info.value, InvalidJobError)
    assert isinstance(info.value, ValueError)
