"""Worker counters and their snapshot."""

from __future__ import annotations

import threading

import attrs


@attrs.frozen(kw_only=True)
class WorkerStats:
    """A snapshot of a worker's counters since it was created.

    ``claimed``: jobs claimed; ``running``: jobs executing now; ``succeeded``: successes written;
    ``failed``: jobs sent to the dead letter (including jobs refused at dispatch); ``retried``:
    failed attempts rescheduled; ``released``: claims given back unstarted at shutdown;
    ``stale``: writes refused because the claim was superseded (cancelled, recovered
    elsewhere); ``recovered``: jobs of dead nodes or stale jobs put back by this node's
    recovery sweeps; ``abandoned``: jobs still running when ``stop`` gave up waiting
    (``worker.shutdown_timeout``): put back to pending while their thread may still be inside
    the job; ``idle``: whether the last ``run_until_idle`` reached idleness.
    """

    claimed: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    released: int = 0
    stale: int = 0
    recovered: int = 0
    abandoned: int = 0
    deferred: int = 0
    idle: bool = False

    @property
    def done(self) -> int:
        """Jobs that reached an outcome on this worker (succeeded, dead letter or retried)."""
        return self.succeeded + self.failed + self.retried


class Counters:
    """Thread-safe counters behind :class:`WorkerStats` (``running`` is read from the table of
    claimed jobs, not counted here)."""

    __slots__ = (
        "_lock",
        "abandoned",
        "claimed",
        "deferred",
        "failed",
        "recovered",
        "released",
        "retried",
        "stale",
        "succeeded",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.claimed = 0
        self.succeeded = 0
        self.failed = 0
        self.retried = 0
        self.released = 0
        self.stale = 0
        self.recovered = 0
        self.abandoned = 0
        self.deferred = 0

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + amount)

    def snapshot(self, *, idle: bool = False) -> WorkerStats:
        with self._lock:
            return WorkerStats(
                claimed=self.claimed,
                succeeded=self.succeeded,
                failed=self.failed,
                retried=self.retried,
                released=self.released,
                stale=self.stale,
                recovered=self.recovered,
                abandoned=self.abandoned,
                deferred=self.deferred,
                idle=idle,
            )


__all__ = ["Counters", "WorkerStats"]
