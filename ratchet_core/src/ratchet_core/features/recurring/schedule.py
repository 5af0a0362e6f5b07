"""Fire times of a recurring definition: cron expressions in a time zone, or fixed intervals.

A schedule is stored as one string (``RecurringJobEntity.cron``) plus a time zone name:

* a cron expression of 5 fields (``minute hour day month weekday``) or 6 fields with the
  seconds FIRST (``second minute hour day month weekday``, as Quartz and Spring write them);
* an alias: ``@yearly`` (``@annually``), ``@monthly``, ``@weekly``, ``@daily`` (``@midnight``),
  ``@hourly``;
* a fixed interval ``@every 90s`` (written by ``every=timedelta(seconds=90)``), counted from the
  previous fire time in UTC (the first slot on a grid aligned to the Unix epoch); the time zone
  plays no part.

Cron fields are evaluated on the zone's wall clock (``croniter`` on naive local times) and each
matching wall time is mapped to one UTC instant here, so daylight saving time is handled in one
place, the way cron has always done it:

* a wall time that does not exist (the hour skipped when clocks spring forward) fires once, at
  the moment of the change (``30 2 * * *`` in Europe/Berlin fires at 03:00 CEST that day);
* a wall time that happens twice (the hour repeated when clocks fall back) fires once, at its
  first occurrence.

Expressions whose hour field is ``*`` (every hour: ``*/15 * * * *``, ``@hourly``) follow
elapsed time instead: they fire in both passes of a repeated hour and not at all in a skipped
one, so an hourly job runs once per real hour.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs

from ratchet_api.errors import InvalidScheduleError

if TYPE_CHECKING:
    from croniter import croniter

# croniter (and dateutil under it) is imported when a cron expression is first parsed: a
# worker with no recurring definition never loads it.

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
EVERY_PREFIX = "@every "
MIN_INTERVAL = timedelta(seconds=1)
_TRANSITION_WINDOW = timedelta(hours=3)
"""Wider than any DST shift: a fold or gap within this distance of an instant can matter."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAME = re.compile(r"^[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*$")


def zone(name: str) -> ZoneInfo:
    """The IANA zone ``name`` (``"Europe/Berlin"``, ``"UTC"``); ``InvalidScheduleError`` if unknown."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidScheduleError(
            f"time zone {name!r} is not an IANA zone name like 'Europe/Berlin'"
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidScheduleError(
            f"unknown time zone {name!r}; use an IANA name like 'Europe/Berlin' or 'UTC' "
            "(install the tzdata package where the system has no zone database)"
        ) from None


def interval_expression(every: timedelta) -> str:
    """The stored form of a fixed interval (``@every 90s``)."""
    if not isinstance(every, timedelta):
        raise InvalidScheduleError(f"every must be a timedelta, got {every!r}")
    if every < MIN_INTERVAL:
        raise InvalidScheduleError(f"every must be at least 1 second, got {every}")
    seconds = every.total_seconds()
    text = f"{seconds:.6f}".rstrip("0").rstrip(".")
    return f"{EVERY_PREFIX}{text}s"


class Schedule:
    """A parsed schedule. ``next_after(instant, anchor)`` is the first fire time strictly after
    ``instant`` (aware UTC); ``anchor`` is a previous fire time that interval schedules count
    from (cron schedules ignore it). Immutable and thread safe."""

    expression: str
    timezone: str

    def next_after(self, instant: datetime, anchor: datetime | None = None) -> datetime:
        raise NotImplementedError

    def describe(self) -> str:
        return self.expression if self.timezone == "UTC" else f"{self.expression} ({self.timezone})"


@attrs.frozen
class IntervalSchedule(Schedule):
    expression: str
    timezone: str
    interval: timedelta

    def next_after(self, instant: datetime, anchor: datetime | None = None) -> datetime:
        # Without an anchor the grid is aligned to the Unix epoch, so workers declaring the same
        # definition at about the same time compute the same first slot.
        anchor = _EPOCH if anchor is None else anchor
        if anchor > instant:
            return anchor.astimezone(UTC)
        steps = math.floor((instant - anchor) / self.interval) + 1
        return (anchor + steps * self.interval).astimezone(UTC)


@attrs.frozen
class CronSchedule(Schedule):
    expression: str
    timezone: str
    fields: str
    seconds_first: bool
    elapsed_hours: bool
    """The hour field is ``*``: follow elapsed time across DST changes (see the module doc)."""
    tz: tzinfo = attrs.field(eq=False, repr=False)

    def _iter(self, start: datetime) -> croniter:
        from croniter import croniter

        return croniter(self.fields, start, second_at_beginning=self.seconds_first)

    def next_after(self, instant: datetime, anchor: datetime | None = None) -> datetime:
        after = instant.astimezone(UTC)
        local = after.astimezone(self.tz).replace(tzinfo=None)
        # Near a DST change a wall time at or before ``local`` may still map to a later instant
        # (the second pass of a repeated hour): start earlier and keep the earliest instant.
        near_change = _offset(self.tz, after - _TRANSITION_WINDOW) != _offset(
            self.tz, after + _TRANSITION_WINDOW
        )
        start = local - _TRANSITION_WINDOW if near_change else local
        from croniter import CroniterError

        it = self._iter(start)
        best: datetime | None = None
        for _ in range(100_000):
            try:
                wall: datetime = it.get_next(datetime)
            except CroniterError as exc:
                raise InvalidScheduleError(
                    f"cron {self.expression!r} has no fire time after {after.isoformat()}"
                ) from exc
            instants, unambiguous = self._instants(wall)
            for candidate in instants:
                if candidate > after and (best is None or candidate < best):
                    best = candidate
            if best is not None and unambiguous and instants and instants[0] > after:
                return best
        raise InvalidScheduleError(  # pragma: no cover - needs a pathological expression
            f"cron {self.expression!r}: no fire time found after {after.isoformat()}"
        )

    def _instants(self, wall: datetime) -> tuple[list[datetime], bool]:
        """The UTC instants of one matching wall time and whether the mapping was plain."""
        first = wall.replace(tzinfo=self.tz, fold=0)
        second = wall.replace(tzinfo=self.tz, fold=1)
        u0, u1 = first.astimezone(UTC), second.astimezone(UTC)
        if u0 == u1:
            return [u0], True
        exists = u0.astimezone(self.tz).replace(tzinfo=None) == wall
        if exists:  # repeated wall time
            return ([u0, u1] if self.elapsed_hours else [u0]), False
        if self.elapsed_hours:  # skipped wall time: no such hour to fire in
            return [], False
        return [_end_of_gap(wall, self.tz)], False


def _offset(tz: tzinfo, instant: datetime) -> timedelta | None:
    return instant.astimezone(tz).utcoffset()


def _end_of_gap(wall: datetime, tz: tzinfo) -> datetime:
    """The instant a skipped wall time's gap ends (the clock change), found by the first
    existing wall minute after it."""
    probe = wall.replace(second=0, microsecond=0)
    for _ in range(24 * 60):
        probe += timedelta(minutes=1)
        u = probe.replace(tzinfo=tz).astimezone(UTC)
        if u.astimezone(tz).replace(tzinfo=None) == probe:
            return u
    raise InvalidScheduleError(f"no wall time after {wall} exists in {tz}")  # pragma: no cover


def parse_schedule(expression: str, timezone: str = "UTC") -> Schedule:
    """Parse and validate a stored schedule; ``InvalidScheduleError`` names what is wrong."""
    if not isinstance(expression, str) or not expression.strip():
        raise InvalidScheduleError(
            f"a schedule must be a non-empty cron expression, got {expression!r}"
        )
    text = " ".join(expression.split())
    if text.lower().startswith(EVERY_PREFIX):
        raw = text[len(EVERY_PREFIX) :]
        try:
            seconds = float(raw.removesuffix("s"))
        except ValueError:
            raise InvalidScheduleError(
                f"interval {expression!r} must look like '@every 90s'"
            ) from None
        if not raw.endswith("s") or not math.isfinite(seconds) or seconds < 1:
            raise InvalidScheduleError(
                f"interval {expression!r} must be '@every <seconds>s' of at least 1 second"
            )
        return IntervalSchedule(text, timezone, timedelta(seconds=seconds))
    tz = zone(timezone)
    fields = ALIASES.get(text.lower(), text)
    if fields.startswith("@"):
        raise InvalidScheduleError(
            f"unknown cron alias {expression!r}; use one of {', '.join(sorted(ALIASES))}"
        )
    parts = fields.split(" ")
    if len(parts) not in (5, 6):
        raise InvalidScheduleError(
            f"cron {expression!r} has {len(parts)} fields; write 5 (minute hour day month "
            "weekday) or 6 with seconds first (second minute hour day month weekday)"
        )
    seconds_first = len(parts) == 6
    hour = parts[2] if seconds_first else parts[1]
    from croniter import CroniterError, croniter

    try:
        if not croniter.is_valid(fields, second_at_beginning=seconds_first):
            raise CroniterError("not a valid expression")
    except CroniterError as exc:
        raise InvalidScheduleError(f"invalid cron expression {expression!r}: {exc}") from None
    schedule = CronSchedule(text, timezone, fields, seconds_first, hour == "*", tz)
    # an expression that never matches (30 February) is refused now, not in the worker
    schedule.next_after(datetime(2000, 1, 1, tzinfo=UTC))
    return schedule


__all__ = [
    "ALIASES",
    "CronSchedule",
    "IntervalSchedule",
    "Schedule",
    "interval_expression",
    "parse_schedule",
    "zone",
]
