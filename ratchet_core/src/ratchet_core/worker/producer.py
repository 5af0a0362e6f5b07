"""The producer: the one count of this node's busy slots, and the claims sized by it.

A slot is taken when a job is claimed and given back when the job's outcome is handed over
(or its claim released). :class:`SlotCount` is the only place that counts them; the producer
never claims more jobs than there are free slots (``worker.concurrency`` +
``worker.prefetch``). While every job thread is busy it claims again only once
``watermark`` slots are free: fewer, larger claims (a claim costs about as much for 50 jobs as
for 5); a free job thread is never kept waiting for the watermark.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import attrs

from ratchet_api.store.entities import JobEntity
from ratchet_core.worker.poller_guard import PollerGuard


class SlotCount:
    """Busy slots of one worker. Thread safe. ``on_free`` runs (outside the lock) when a slot
    is given back while the producer waits for one."""

    def __init__(
        self, capacity: int, busy_at: int, watermark: int, on_free: Callable[[], None]
    ) -> None:
        self.capacity = max(1, capacity)
        self._busy_at = max(1, busy_at)
        self._watermark = max(1, watermark)
        self._on_free = on_free
        self._cond = threading.Condition()
        self._in_use = 0
        self._waiting = False

    @property
    def in_use(self) -> int:
        with self._cond:
            return self._in_use

    def claimable(self, batch_size: int) -> int:
        """How many jobs to claim now (0: wait for a slot; ``on_free`` will be called)."""
        with self._cond:
            free = self.capacity - self._in_use
            if free <= 0 or (self._in_use >= self._busy_at and free < self._watermark):
                self._waiting = True
                return 0
            self._waiting = False
            return min(free, batch_size)

    def take(self, count: int) -> None:
        with self._cond:
            self._in_use += count

    def give_back(self, count: int = 1) -> None:
        with self._cond:
            self._in_use -= count
            wake, self._waiting = self._waiting, False
            self._cond.notify_all()
        if wake:
            self._on_free()

    def wait_until_free(self, timeout: float) -> bool:
        """Wait until no slot is busy (at most ``timeout`` seconds); True when none is."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._in_use > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True


@attrs.frozen
class Claim:
    """One claim: the jobs it returned and how many it asked for."""

    jobs: list[JobEntity]
    asked: int


class Producer:
    """Claims jobs into free slots. ``claim(limit)`` is the store call (timed by the worker);
    the poller's breaker guards it. Not thread safe: one poller thread calls it."""

    def __init__(
        self,
        slots: SlotCount,
        claim: Callable[[int], list[JobEntity]],
        guard: PollerGuard,
        batch_size: int,
    ) -> None:
        self.slots = slots
        self._claim = claim
        self._guard = guard
        self._batch_size = max(1, batch_size)

    def poll_once(self) -> Claim | None:
        """Claim as many jobs as there are free slots (at most a batch); None when no slot is
        free. The slots of the claimed jobs are taken before it returns. Raises what the claim
        raises (``CircuitBreakerOpenError`` while the poller breaker is open)."""
        want = self.slots.claimable(self._batch_size)
        if want == 0:
            return None
        jobs = self._guard.claim(lambda: self._claim(want))
        self.slots.take(len(jobs))
        return Claim(jobs, want)


__all__ = ["Claim", "Producer", "SlotCount"]
