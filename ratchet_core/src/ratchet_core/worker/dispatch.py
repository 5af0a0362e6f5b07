"""Started marks: the worker tells the store a claimed job has started (``mark_dispatched``),
so that recovery never charges an attempt to a job that did not start.

A mark is written one of two ways:

* **checked** (:meth:`DispatchMarks.mark`): before the job runs, and the job runs only if the
  store answers that its claim is still current. Threads that start jobs at the same moment
  share one store call (group commit): one thread at a time writes every mark queued so far;
  the others wait, each on its own event, for their answer, and when the writer is done it
  wakes only the threads it answered, plus one still waiting, which writes the next group.
* **noted** (:meth:`DispatchMarks.note`): the job starts at once and its mark is written
  ``delay`` seconds later, together with the other noted marks, unless the job finished first
  (:meth:`DispatchMarks.forget`): a short job costs no store call for its mark. Once the
  worker :meth:`attaches <DispatchMarks.attach>` its completer, the noted marks go in the
  completer's batches (one ``mark_dispatched`` per flush); before that, a writer thread of
  this class writes them. The
  worker notes a mark only when the store cannot have taken the claim back (see
  ``Worker._begin``). A job whose worker dies before its noted mark is written is given back
  without charging the attempt; its next claim is then checked, so a job that kills its worker
  at once is charged from its second claim on.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol
from uuid import UUID

from ratchet_api.store.protocols import JobStore


class MarkSink(Protocol):
    """Who writes noted marks in its batches (the completer)."""

    def note_started(self, job_id: UUID, claim_seq: int) -> None: ...

    def forget_started(self, job_id: UUID, claim_seq: int) -> None: ...


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

    def __init__(self, store: JobStore, delay: float = 0.005) -> None:
        self._store = store
        self._lock = threading.Lock()
        # job id -> waiters: one job may be queued under two claims (an older claim of it still
        # held when the node claims it again); the store is asked about the newest
        self._queued: dict[UUID, list[_Waiter]] = {}
        self._writing = False
        # noted marks: job id -> claim sequence, written by the writer thread unless forgotten
        self._delay = max(0.0, delay)
        self._noted: dict[UUID, int] = {}
        self._running: dict[UUID, int] = {}  # noted and not forgotten (written or not)
        self._noted_cond = threading.Condition()
        self._writer: threading.Thread | None = None
        self._closed = False
        self._sink: MarkSink | None = None

    def attach(self, sink: MarkSink) -> None:
        """Noted marks from now on go to ``sink`` (the completer writes them in its batches)."""
        self._sink = sink

    # ------------------------------------------------------------------ noted marks

    def note(self, job_id: UUID, claim_seq: int) -> None:
        """The job starts now; its mark is written about ``delay`` seconds later unless
        :meth:`forget` comes first. Never blocks on the store."""
        sink = self._sink
        if sink is not None:
            sink.note_started(job_id, claim_seq)
            return
        with self._noted_cond:
            self._running[job_id] = claim_seq
            closed = self._closed
            if not closed:
                self._noted[job_id] = claim_seq
                if self._writer is None or not self._writer.is_alive():
                    self._writer = threading.Thread(
                        target=self._write_noted, name="ratchet-started-marks", daemon=True
                    )
                    self._writer.start()
                self._noted_cond.notify()
        if closed:  # a job started while the worker stops: no writer any more
            self._write_noted_group({job_id: claim_seq})

    def forget(self, job_id: UUID, claim_seq: int) -> None:
        """The job finished (or was given back): a noted mark not yet written is dropped."""
        sink = self._sink
        if sink is not None:
            sink.forget_started(job_id, claim_seq)
        with self._noted_cond:
            if self._running.get(job_id) == claim_seq:
                del self._running[job_id]
                if self._noted.get(job_id) == claim_seq:
                    del self._noted[job_id]

    def close(self, timeout: float = 5.0) -> None:
        """Write the noted marks still pending and stop the writer thread."""
        with self._noted_cond:
            self._closed = True
            writer = self._writer
            self._noted_cond.notify()
        if writer is not None:
            writer.join(timeout)

    def _write_noted(self) -> None:
        backoff = 0.0  # after a failed write: up to 1 s between tries
        while True:
            with self._noted_cond:
                while not self._noted and not self._closed:
                    self._noted_cond.wait()
                if not self._noted:
                    return
                closing = self._closed
            pause = max(self._delay, backoff)
            with self._noted_cond:
                if not closing and pause:
                    # jobs that finish meanwhile need no mark; close() ends the wait early
                    self._noted_cond.wait_for(lambda: self._closed, timeout=pause)
                group, self._noted = self._noted, {}
            if group:
                written = self._write_noted_group(group)
                backoff = 0.0 if written else min(1.0, max(0.05, backoff * 2))

    def _write_noted_group(self, group: dict[UUID, int]) -> bool:
        """One store call for ``group``; False when it failed (the marks of jobs still
        running are queued again)."""
        try:
            applied = self._store.mark_dispatched(group)
        except Exception as exc:  # noqa: BLE001 - the jobs run on; written again next round
            _log.warning("writing the started marks of %d job(s) failed: %s", len(group), exc)
            with self._noted_cond:
                if not self._closed:
                    for job_id, seq in group.items():
                        if self._running.get(job_id) == seq:
                            self._noted.setdefault(job_id, seq)
            return False
        with self._noted_cond:
            superseded = [
                job_id
                for job_id, seq in group.items()
                if job_id not in applied and self._running.get(job_id) == seq
            ]
        for job_id in superseded:
            _log.warning(
                "job %s was recovered or cancelled while it started: its outcome will be "
                "refused (the claim is no longer current)",
                job_id,
            )
        return True

    # ------------------------------------------------------------------ checked marks

    def mark(self, job_id: UUID, claim_seq: int) -> bool | None:
        """A checked mark, written before the job runs. True: the claim is current and marked
        started; False: the claim was superseded (recovered, cancelled, claimed again) and the
        job should not run; None: the store could not be reached (logged; the job runs and the
        worker notes its mark, which the writer thread retries)."""
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
