"""The one table of the jobs a worker claimed.

Every claimed job is in the table from its claim until its outcome is written (or given up),
and every count the worker needs is read from it: free slots for the producer, jobs running now
(``WorkerStats.running``), the ids to heartbeat, the jobs to give back or requeue at shutdown,
the concurrency of each gate (execution kind or execution target label). Every state change
happens here, under one lock:

    QUEUED --begin--> RUNNING --hand_over--> FINISHED --written--> GONE
    QUEUED --hand_over(released)--> RELEASED --written--> GONE

A job is given back (RELEASED) only from QUEUED, and ``begin`` refuses once :meth:`halt` ran,
so stop() can never give back, uncharged, a job that has started: either the job began before
the give-back (which is then refused: its own outcome path accounts for it) or the give-back
came first (and the job never starts).

Slots: at most ``concurrency + prefetch`` jobs are QUEUED or RUNNING; while every job thread is
busy, the producer claims again only once ``watermark`` slots are free (fewer, larger claims).
Outcomes handed over but not written yet (FINISHED, RELEASED) are the completer's backlog: at
``backlog`` of them the producer claims nothing more, so a store outage slows claiming instead
of growing memory.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from uuid import UUID

import attrs

from ratchet_core.worker.execution import (
    FINISHED,
    GONE,
    QUEUED,
    RELEASED,
    RUNNING,
    ClaimedJob,
    GateKey,
)


@attrs.define
class _Gate:
    limit: int
    running: int = 0
    waiting: deque[ClaimedJob] = attrs.field(factory=deque)


class ClaimedJobs:
    """The claimed-jobs table (see the module docstring). Thread safe. ``gate_limit(key)`` gives
    a gate's concurrency the first time a job of it is seen; ``on_free`` runs (outside the lock)
    when room frees up while the producer waits for it."""

    def __init__(
        self,
        *,
        concurrency: int,
        prefetch: int,
        backlog: int,
        watermark: int,
        gate_limit: Callable[[GateKey], int],
        on_free: Callable[[], None],
    ) -> None:
        self.capacity = max(1, concurrency + prefetch)
        self._busy_at = max(1, concurrency)
        self._watermark = max(1, watermark)
        self.backlog = max(1, backlog)
        self._gate_limit = gate_limit
        self._on_free = on_free
        self._cond = threading.Condition()
        self._jobs: dict[UUID, ClaimedJob] = {}  # the claim heartbeated, per job id
        # every claim until written, by id(): a job re-claimed as ours while an older claim
        # of it is still here (a heartbeat lapse) keeps both visible to stop()
        self._claims: dict[int, ClaimedJob] = {}
        self._gated: set[int] = set()  # id() of jobs holding a gate slot
        self._gates: dict[GateKey, _Gate] = {}
        self._active = 0  # QUEUED + RUNNING
        self._running = 0
        self._unwritten = 0  # FINISHED + RELEASED
        self._waiting_for_room = False
        self._stopping = False

    # ------------------------------------------------------------ producer

    def claimable(self, batch_size: int) -> int:
        """How many jobs to claim now (0: wait; ``on_free`` is called when room frees up)."""
        with self._cond:
            free = self.capacity - self._active
            if (
                free <= 0
                or self._unwritten >= self.backlog
                or (self._active >= self._busy_at and free < self._watermark)
            ):
                self._waiting_for_room = True
                return 0
            self._waiting_for_room = False
            return min(free, batch_size)

    def startable(self, limit: int) -> int:
        """How many of ``limit`` jobs claimed now would start at once (free running slots of
        ``worker.concurrency``; the rest wait as prefetched jobs): the claim marks that many
        started (``WorkerBatchStore.claim_and_start``)."""
        with self._cond:
            return max(0, min(limit, self._busy_at - self._active))

    def add(self, job: ClaimedJob) -> None:
        """A job just claimed (QUEUED). A newer claim of a job already in the table (recovered
        as ours while it ran) becomes the one heartbeated."""
        with self._cond:
            job.state = QUEUED
            self._jobs[job.entity.id] = job
            self._claims[id(job)] = job
            self._active += 1

    # ------------------------------------------------------------ gates and states

    def enter_gate(self, job: ClaimedJob) -> bool | None:
        """Take a slot of ``job``'s gate: True to start it now, False when it waits for one
        (started by :meth:`hand_over` of another job), None when the worker stops (give it
        back)."""
        with self._cond:
            if self._stopping:
                return None
            gate = self._gates.get(job.gate)
            if gate is None:
                gate = self._gates[job.gate] = _Gate(max(1, self._gate_limit(job.gate)))
            if gate.running >= gate.limit:
                gate.waiting.append(job)
                return False
            gate.running += 1
            self._gated.add(id(job))
            return True

    def leave_gate(self, job: ClaimedJob) -> None:
        """Give back the gate slot :meth:`enter_gate` took for a job that never started."""
        with self._cond:
            self._leave_gate(job)

    def begin(self, job: ClaimedJob) -> bool:
        """QUEUED -> RUNNING (stamps the start); False when the job is no longer QUEUED or the
        worker is halting (a job not started by :meth:`halt` never starts: stop() gives it
        back)."""
        with self._cond:
            if job.state != QUEUED or self._stopping:
                return False
            job.state = RUNNING
            self._running += 1
        job.started_at = datetime.now(UTC)
        job.started_mono = time.perf_counter()
        return True

    def hand_over(
        self, job: ClaimedJob, *, released: bool = False
    ) -> tuple[bool, ClaimedJob | None]:
        """``job``'s outcome goes to the completer: FINISHED (RELEASED when given back
        unstarted). Returns whether it was handed over now (False: it was before, or a give-back
        found the job no longer QUEUED: a job that started is never released uncharged) and the
        next job waiting for its gate slot (already gated) for the caller to start."""
        with self._cond:
            if job.state in (FINISHED, RELEASED, GONE) or (released and job.state != QUEUED):
                return False, None
            if job.state == RUNNING:
                self._running -= 1
            else:
                self._drop_waiting(job)
            job.state = RELEASED if released else FINISHED
            self._active -= 1
            self._unwritten += 1
            following = self._leave_gate(job)
            wake = self._room_freed()
            self._cond.notify_all()
        if wake:
            self._on_free()
        return True, following

    def written(self, job: ClaimedJob) -> None:
        """The outcome of ``job`` was written (or given up on): out of the table (GONE). Once
        per hand-over: a second call is a no-op, so the backlog count never goes negative."""
        with self._cond:
            if job.state not in (FINISHED, RELEASED):
                return
            job.state = GONE
            self._unwritten -= 1
            self._claims.pop(id(job), None)
            if self._jobs.get(job.entity.id) is job:
                del self._jobs[job.entity.id]
            wake = self._room_freed()
            self._cond.notify_all()
        if wake:
            self._on_free()

    # ------------------------------------------------------------ shutdown and reads

    def halt(self) -> None:
        """Start nothing more: no job waiting for a gate slot gets one (stop() gives the
        QUEUED jobs back, :meth:`queued`)."""
        with self._cond:
            self._stopping = True
            for gate in self._gates.values():
                gate.waiting.clear()

    def queued(self) -> list[ClaimedJob]:
        """The jobs claimed and not started."""
        with self._cond:
            return [job for job in self._claims.values() if job.state == QUEUED]

    def wait_until_none_active(self, timeout: float) -> bool:
        """Wait until no job is QUEUED or RUNNING (at most ``timeout`` s); True when none is."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._active > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def wait_until_empty(self, timeout: float) -> bool:
        """Wait until every claimed job's outcome is written (at most ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._active or self._unwritten:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def running_jobs(self) -> list[ClaimedJob]:
        with self._cond:
            return [job for job in self._claims.values() if job.state == RUNNING]

    def owned_ids(self) -> list[UUID]:
        """Ids of the jobs whose claims this node holds (heartbeated)."""
        with self._cond:
            return list(self._jobs)

    @property
    def running(self) -> int:
        with self._cond:
            return self._running

    @property
    def empty(self) -> bool:
        with self._cond:
            return not (self._active or self._unwritten or self._jobs)

    @property
    def unwritten(self) -> int:
        with self._cond:
            return self._unwritten

    @property
    def in_use(self) -> int:
        """Jobs QUEUED or RUNNING (the slots taken)."""
        with self._cond:
            return self._active

    # ------------------------------------------------------------ under the lock

    def _leave_gate(self, job: ClaimedJob) -> ClaimedJob | None:
        if id(job) not in self._gated:
            return None
        self._gated.discard(id(job))
        gate = self._gates[job.gate]
        gate.running -= 1
        while gate.waiting and not self._stopping:
            candidate = gate.waiting.popleft()
            if candidate.state == QUEUED:
                gate.running += 1
                self._gated.add(id(candidate))
                return candidate
        return None

    def _drop_waiting(self, job: ClaimedJob) -> None:
        gate = self._gates.get(job.gate)
        if gate is not None and job in gate.waiting:
            gate.waiting.remove(job)

    def _room_freed(self) -> bool:
        if not self._waiting_for_room:
            return False
        self._waiting_for_room = False
        return True


__all__ = ["ClaimedJobs"]
