"""Started marks: the worker tells the store a claimed job is starting (``mark_dispatched``)
just before it runs, so that recovery never charges an attempt to a job that did not start.

Threads that start jobs at the same moment share one store call (group commit): the first
thread to arrive writes every mark queued so far while the others wait for its answer.
"""

from __future__ import annotations

import logging
import threading
from uuid import UUID

from ratchet_api.store.protocols import JobStore

_log = logging.getLogger("ratchet.worker")


class DispatchMarks:
    """Writes started marks, batching the marks of concurrently starting jobs. Thread safe."""

    def __init__(self, store: JobStore) -> None:
        self._store = store
        self._cond = threading.Condition()
        self._queued: dict[UUID, int] = {}
        self._answers: dict[UUID, bool | None] = {}
        self._writing = False

    def mark(self, job_id: UUID, claim_seq: int) -> bool | None:
        """True: the claim is current and marked started; False: the claim was superseded
        (recovered, cancelled, claimed again) and the job should not run; None: the store
        could not be reached (logged; the job runs, and if its node dies its attempt is
        counted as before)."""
        with self._cond:
            self._queued[job_id] = claim_seq
            while job_id not in self._answers and self._writing:
                self._cond.wait()
            if job_id in self._answers:
                return self._answers.pop(job_id)
            self._writing = True
            batch, self._queued = self._queued, {}
        answers: dict[UUID, bool | None]
        try:
            applied = self._store.mark_dispatched(batch)
            answers = {i: i in applied for i in batch}
        except Exception as exc:  # noqa: BLE001 - the job still runs (see the docstring)
            _log.warning("marking %d job(s) as started failed: %s", len(batch), exc)
            answers = dict.fromkeys(batch)
        with self._cond:
            self._writing = False
            self._answers.update(answers)
            self._cond.notify_all()
            return self._answers.pop(job_id)


__all__ = ["DispatchMarks"]
