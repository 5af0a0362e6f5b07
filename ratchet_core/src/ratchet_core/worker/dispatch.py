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
    __slots__ = ("answer", "event", "lead")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.answer: bool | None = None
        self.lead = False


class DispatchMarks:
    """Writes started marks, batching the marks of concurrently starting jobs. Thread safe."""

    def __init__(self, store: JobStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._queued: dict[UUID, tuple[int, _Waiter]] = {}
        self._writing = False

    def mark(self, job_id: UUID, claim_seq: int) -> bool | None:
        """True: the claim is current and marked started; False: the claim was superseded
        (recovered, cancelled, claimed again) and the job should not run; None: the store
        could not be reached (logged; the job runs, and if its node dies its attempt is
        counted as before)."""
        me = _Waiter()
        with self._lock:
            self._queued[job_id] = (claim_seq, me)
            if self._writing:
                leading = False
            else:
                self._writing = leading = True
        if not leading:
            me.event.wait()
            if not me.lead:
                return me.answer
        return self._write_group(job_id, me)

    def _write_group(self, job_id: UUID, me: _Waiter) -> bool | None:
        with self._lock:
            group, self._queued = self._queued, {}
        answers: dict[UUID, bool | None]
        try:
            applied = self._store.mark_dispatched({i: seq for i, (seq, _) in group.items()})
            answers = {i: i in applied for i in group}
        except Exception as exc:  # noqa: BLE001 - the job still runs (see the docstring)
            _log.warning("marking %d job(s) as started failed: %s", len(group), exc)
            answers = dict.fromkeys(group)
        for other, (_, waiter) in group.items():
            if waiter is not me:
                waiter.answer = answers[other]
                waiter.event.set()
        with self._lock:
            if self._queued:  # marks queued meanwhile: their first thread writes them next
                _, successor = next(iter(self._queued.values()))
                successor.lead = True
                successor.event.set()
            else:
                self._writing = False
        return answers[job_id]


__all__ = ["DispatchMarks"]
