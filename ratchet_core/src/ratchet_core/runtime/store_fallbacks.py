"""What a 1.0 store is given and the capabilities that grew since 1.0, for ``store_compat``'s
adapter: the named priority a 1.0 store understands, and a 1.0 ``RecurringJobStore`` presented
with today's protocol."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import attrs

from ratchet_api.model import JobPriority
from ratchet_api.store.entities import RecurringAdvance, RecurringJobEntity


def named_priority(priority: int) -> JobPriority:
    """The named ``JobPriority`` nearest to ``priority`` (bands split half-way between the
    points, so the mapping never inverts an order): what a 1.0 store is given."""
    if isinstance(priority, JobPriority):
        return priority
    if priority < (JobPriority.LOW + JobPriority.NORMAL) / 2:
        return JobPriority.LOW
    if priority < (JobPriority.NORMAL + JobPriority.HIGH) / 2:
        return JobPriority.NORMAL
    if priority < (JobPriority.HIGH + JobPriority.CRITICAL) / 2:
        return JobPriority.HIGH
    return JobPriority.CRITICAL


class RecurringFallback:
    """A 1.0 ``RecurringJobStore`` with today's protocol: ``advance_next_fire_many`` as one
    ``advance_next_fire`` per definition (each compare-and-set applies or not on its own, which
    is the method's contract; only the single commit is lost), in name order; priorities
    rounded to the named points."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def save_recurring(self, recurring: RecurringJobEntity) -> RecurringJobEntity:
        if not isinstance(recurring.priority, JobPriority):
            recurring = attrs.evolve(recurring, priority=named_priority(recurring.priority))
        result: RecurringJobEntity = self._inner.save_recurring(recurring)
        return result

    def find_recurring(self, name: str) -> RecurringJobEntity | None:
        result: RecurringJobEntity | None = self._inner.find_recurring(name)
        return result

    def list_recurring(self) -> list[RecurringJobEntity]:
        return list(self._inner.list_recurring())

    def find_due_recurring(self, limit: int) -> list[RecurringJobEntity]:
        return list(self._inner.find_due_recurring(limit))

    def advance_next_fire(
        self, name: str, expected_fire_at: datetime, next_fire_at: datetime
    ) -> bool:
        return bool(self._inner.advance_next_fire(name, expected_fire_at, next_fire_at))

    def advance_next_fire_many(self, advances: Sequence[RecurringAdvance]) -> set[str]:
        return {
            a.name
            for a in sorted(advances, key=lambda a: a.name)
            if self.advance_next_fire(a.name, a.expected_fire_at, a.next_fire_at)
        }

    def delete_recurring(self, name: str) -> bool:
        return bool(self._inner.delete_recurring(name))


__all__ = ["RecurringFallback", "named_priority"]
