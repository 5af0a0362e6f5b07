"""Admission: the last checks before a claimed job's target is called.

1. the circuit-breaker pre-check (advisory: the breaker checks the call itself anyway);
2. flow control: a resource permit and a rate limit (``flow_control.py``);
3. the started mark (``dispatch.py``): none for a job its claim marked started
   (``WorkerBatchStore.claim_and_start``) while it is fresh, else noted (written in the
   completer's next batch) or checked.

:meth:`Admission.admit` answers None (the job runs) or the :class:`~.outcome.Happened` value
that ends it instead (an open circuit, a deferral by flow control, a superseded claim). Steps
2 and 3 may call the store; :meth:`Admission.may_block` tells the executor when, so that an
``async def`` job is admitted off its event loop (``asyncio.to_thread``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime

from ratchet_api.spi import MetricsCollector, ResilienceStrategy
from ratchet_core.features.flow_control import FlowControl
from ratchet_core.worker.dispatch import DispatchMarks
from ratchet_core.worker.execution import ClaimedJob
from ratchet_core.worker.outcome import CircuitOpen, Happened, Superseded, Throttled

_log = logging.getLogger("ratchet.worker")


class Admission:
    """Admits claimed jobs (see the module docstring). Thread safe."""

    def __init__(
        self,
        *,
        flow: FlowControl,
        resilience: ResilienceStrategy,
        marks: DispatchMarks,
        mark_lease: float,
        now: Callable[[], datetime],
        metrics: MetricsCollector,
    ) -> None:
        self._flow = flow
        self._resilience = resilience
        self._marks = marks
        self._mark_lease = mark_lease
        self._now = now
        self._metrics = metrics

    def may_block(self, job: ClaimedJob) -> bool:
        """Whether :meth:`admit` may wait on the store for ``job``."""
        return job.entity.flow_control is not None or not (self._marked(job) or self._may_note(job))

    def admit(self, job: ClaimedJob) -> Happened | None:
        """None when ``job`` may run now (its permit taken, its started mark noted or
        written, ``job_started`` reported); otherwise what ends it. Never raises."""
        entity = job.entity
        breaker = job.loaded.circuit_breaker if job.loaded is not None else None
        if breaker is not None and not self._available(breaker[0]):
            return CircuitOpen(breaker[0], self.circuit_delay(breaker[0]))
        delay = self._flow.admit(entity)  # resource permit, rate limit; never raises
        if delay is not None:
            return Throttled(delay)
        if self._marked(job):
            pass  # marked started by its claim (WorkerBatchStore.claim_and_start)
        elif self._may_note(job):
            self._marks.note(entity.id, entity.claim_seq)
        else:
            current = self._marks.mark(entity.id, entity.claim_seq)
            if current is False:
                _log.warning(
                    "job %s was recovered or cancelled before it started; not run", entity.id
                )
                self._flow.release(entity)  # the permit taken just above
                return Superseded()
            if current is None:  # the store could not answer: the job runs, its mark retried
                self._marks.note(entity.id, entity.claim_seq)
        self._metrics.job_started(entity.id, entity.job_type, entity.priority)
        return None

    def circuit_delay(self, service: str) -> object:
        """The strategy's ``get_retry_delay(service)`` (None if it raised): validated by
        ``outcome.decide``."""
        try:
            return self._resilience.get_retry_delay(service)
        except Exception:  # noqa: BLE001 - a pluggable part's bug: the default delay
            _log.warning("get_retry_delay(%r) failed", service, exc_info=True)
            return None

    def _available(self, service: str) -> bool:
        try:
            return bool(self._resilience.is_service_available(service))
        except Exception:  # noqa: BLE001 - advisory: the call itself is still guarded
            _log.warning("is_service_available(%r) failed", service, exc_info=True)
            return True

    def _marked(self, job: ClaimedJob) -> bool:
        # Marked started by the claim statement itself (a job that starts at once): no store
        # call at all while nothing can have superseded the claim (the lease below). A job
        # held longer (at a gate) gets a checked mark like any other.
        return job.entity.dispatched_at is not None and self._fresh(job)

    def _may_note(self, job: ClaimedJob) -> bool:
        # Started mark (issue 17, store side): recovery charges no attempt to a claim never
        # marked. The store can take a claim back only once the job's heartbeat is
        # node_timeout old (reset_orphan_jobs, the stale-job sweep); the claim stamped it, so
        # within half of that since the claim was sent, nothing can have superseded it and
        # the mark is noted (written shortly after the start, skipped if the job finished
        # first). Later, or for a job given back without charge before (claim_seq > attempt:
        # it may have killed its worker before its mark was written), the mark is checked
        # before the job runs and a claim the store reports superseded is not run.
        # Both clocks are asked: the monotonic one keeps running through SIGSTOP, the store's
        # (local wall clock + measured offset) through a host suspend.
        return job.entity.claim_seq == job.entity.attempt and self._fresh(job)

    def _fresh(self, job: ClaimedJob) -> bool:
        """Within the mark lease since the claim (both clocks)."""
        entity = job.entity
        return time.monotonic() - job.claimed_mono < self._mark_lease and (
            entity.heartbeat_at is None
            or (self._now() - entity.heartbeat_at).total_seconds() < self._mark_lease
        )


__all__ = ["Admission"]
