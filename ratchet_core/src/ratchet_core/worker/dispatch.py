"""Started marks: the worker tells the store a claimed job is starting (``mark_dispatched``)
just before it runs, so that recovery never charges an attempt to a job that did not start.

Threads that start jobs at the same moment share one store call (group commit): one thread at a
time writes every mark queued so far; the others wait, each on its own event, for their answer,
and when the writer is done it wakes only the threads it answered, plus one still waiting, which
writes the next group (no wake-up of every waiting thread per call).
"""

from __future__ import annotations

import logging
import threading
from uuid import UUID

from ratchet_api.store.protocols import JobStore

_log = logging.getLogger("ratchet.worker")


class _Waiter:
    __slots__ = ("answer", "claim_seq", "event", "lead")

    def __init__(self, claim_seq: int) -> None:
        self.claim_seq = claim_seq
        self.event = threading.Event()
        self.answer: bool | None = None
        self.lead = False


class DispatchMarks:
    """Writes started marks, batching the marks of concurrently starting jobs. Thread safe."""

    def __init__(self, store: JobStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        # job id -> waiters: one job may be queued under two claims (an older claim of it still
        # held when the node claims it again); the store is asked about the newest
        self._queued: dict[UUID, list[_Waiter]] = {}
        self._writing = False

    def mark(self, job_id: UUID, claim_seq: int) -> bool | None:
        """True: the claim is current and marked started; False: the claim was superseded
        (recovered, cancelled, claimed again) and the job should not run; None: the store
        could not be reached (logged; the job runs, and if its node dies its attempt is
        counted as before)."""
        me = _Waiter(claim_seq)
        with self._lock:
            self._queued.setdefault(job_id, []).append(me)
            if self._writing:
                leading = False
            else:
                self._writing = leading = True
        if not leading:
            try:
                me.event.wait()
            except BaseException:
                self._withdraw(job_id, me)
                raise
            if not me.lead:
                return me.answer
        self._write_group()
        return me.answer

    def _withdraw(self, job_id: UUID, me: _Waiter) -> None:
        """A waiter interrupted before its answer: out of the queue, and its turn to write the
        next group (if it had been given one) passed on."""
        with self._lock:
            waiters = self._queued.get(job_id, [])
            if me in waiters:
                waiters.remove(me)
                if not waiters:
                    del self._queued[job_id]
            if me.lead:
                self._hand_off()

    def _hand_off(self) -> None:
        # called with the lock held
        if self._queued:
            successor = next(iter(self._queued.values()))[0]
            successor.lead = True
            successor.event.set()
        else:
            self._writing = False

    def _write_group(self) -> None:
        with self._lock:
            group, self._queued = self._queued, {}
        newest = {job_id: max(w.claim_seq for w in waiters) for job_id, waiters in group.items()}
        answers: dict[UUID, bool | None] = dict.fromkeys(group)
        try:
            applied = self._store.mark_dispatched(newest)
            answers = {job_id: job_id in applied for job_id in group}
        except Exception as exc:  # noqa: BLE001 - the jobs still run (see mark's docstring)
            _log.warning("marking %d job(s) as started failed: %s", len(group), exc)
        finally:
            for job_id, waiters in group.items():
                for waiter in waiters:
                    # an older claim of a job queued again is superseded by the newer one
                    waiter.answer = answers[job_id] if waiter.claim_seq == newest[job_id] else False
                    if not waiter.lead:
                        waiter.event.set()
            with self._lock:
                self._hand_off()


__all__ = ["DispatchMarks"]
