"""The runner: one claimed job from its start to the hand-over of its outcome.

:meth:`JobRunner.run_sync` (on a job thread) and :meth:`JobRunner.run_async` (on the event loop)
take the same path:

1. ``ClaimedJobs.begin``: QUEUED -> RUNNING (a job given back at shutdown meanwhile stops here);
2. admission (``admission.py``): the circuit pre-check, flow control, the started mark. For an
   ``async def`` job it runs off the event loop (``asyncio.to_thread``) whenever it may wait on
   the store, so a job waiting for its permit never stalls the other async jobs;
3. the call (``executor.py``);
4. the decision (``outcome.decide``) and the hand-over (:meth:`JobRunner.finish`): the job's
   state in the table becomes FINISHED and its outcome goes to the completer, the only writer.

Every other way a job ends (refused at dispatch, given back at shutdown) also goes through
:meth:`JobRunner.finish`. The runner returns the next job waiting for the slot it freed; the
dispatcher starts it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from ratchet_api.errors import CircuitBreakerOpenError
from ratchet_api.model import JobStatus
from ratchet_api.spi import ErrorSanitizer, MetricsCollector, ResultPersistenceStrategy, RetryPolicy
from ratchet_api.store.entities import Completion, ExecutionRecord
from ratchet_core.features.flow_control import FlowControl
from ratchet_core.payload.codec import PayloadCodec
from ratchet_core.payload.forms import decode_backoff
from ratchet_core.payload.limits import storable_text
from ratchet_core.worker.admission import Admission
from ratchet_core.worker.completion import CompletionBatcher, PendingCompletion, PendingWrite
from ratchet_core.worker.dispatch import DispatchMarks
from ratchet_core.worker.execution import ClaimedJob
from ratchet_core.worker.executor import Attempt, JobExecutor
from ratchet_core.worker.outcome import (
    CircuitOpen,
    DeferReason,
    Happened,
    Outcome,
    OutcomeKind,
    Raised,
    Returned,
    decide,
)
from ratchet_core.worker.table import ClaimedJobs
from ratchet_core.worker.tracebacks import sanitized_traceback

_log = logging.getLogger("ratchet.worker")


class _Refused(Exception):
    """Cause passed to metrics for jobs refused at dispatch."""


class JobRunner:
    """Runs claimed jobs and hands their outcomes over (see the module docstring). Thread
    safe: it keeps no per-job state of its own."""

    def __init__(
        self,
        *,
        table: ClaimedJobs,
        executor: JobExecutor,
        admission: Admission,
        completer: Callable[[], CompletionBatcher | None],
        flow: FlowControl,
        marks: DispatchMarks,
        retry_policy: RetryPolicy,
        sanitizer: ErrorSanitizer,
        results: ResultPersistenceStrategy,
        codec: PayloadCodec,
        metrics: MetricsCollector,
        node_id: str,
        audit: bool,
        now: Callable[[], datetime],
    ) -> None:
        self._table = table
        self._executor = executor
        self._admission = admission
        self._completer = completer
        self._flow = flow
        self._marks = marks
        self._retry_policy = retry_policy
        self._sanitizer = sanitizer
        self._results = results
        self._codec = codec
        self._metrics = metrics
        self._node_id = node_id
        self._audit = audit
        self._now = now

    # ------------------------------------------------------------ running

    def run_sync(self, job: ClaimedJob) -> ClaimedJob | None:
        """Run a prepared ``def`` job on this thread; returns the next job to start."""
        if not self._table.begin(job):
            return None
        happened = self._admission.admit(job)
        attempt = self._executor.attempt_sync(job) if happened is None else None
        return self.finish(job, self._conclude(job, happened, attempt))

    async def run_async(self, job: ClaimedJob) -> ClaimedJob | None:
        """Run a prepared ``async def`` job on the running loop; the store is never waited on
        from the loop (admission and the permit's release run in a thread when they may)."""
        if not self._table.begin(job):
            return None
        blocking = self._admission.may_block(job)
        if blocking:
            happened = await asyncio.to_thread(self._admission.admit, job)
        else:
            happened = self._admission.admit(job)
        attempt = await self._executor.attempt_async(job) if happened is None else None
        if blocking:
            return await asyncio.to_thread(self._conclude_and_finish, job, happened, attempt)
        return self._conclude_and_finish(job, happened, attempt)

    def _conclude_and_finish(
        self, job: ClaimedJob, happened: Happened | None, attempt: Attempt | None
    ) -> ClaimedJob | None:
        return self.finish(job, self._conclude(job, happened, attempt))

    def _conclude(
        self, job: ClaimedJob, happened: Happened | None, attempt: Attempt | None
    ) -> Outcome:
        entity = job.entity
        if attempt is not None:
            self._flow.release(entity)  # resource permit (flow control)
            happened = self._happened(job, attempt)
            if attempt.logger is not None:
                if isinstance(happened, Raised):
                    self._log_to_job(job, attempt, happened.error)
                attempt.logger.finish()
        assert happened is not None
        return self.decide(job, happened)

    def _happened(self, job: ClaimedJob, attempt: Attempt) -> Happened:
        error = attempt.error
        if error is None:
            try:
                serialized = self._results.serialize(job.entity.id, attempt.result)
                return Returned(self._codec.seal_result(job.entity, serialized.json))
            except Exception as exc:  # noqa: BLE001 - an unstorable result fails the attempt
                return Raised(exc)
        breaker = job.loaded.circuit_breaker if job.loaded is not None else None
        if isinstance(error, CircuitBreakerOpenError) and breaker is not None:
            # Rejected by the breaker without running (it opened after the pre-check): not
            # a failed attempt; wait for the circuit, not for the job's backoff.
            return CircuitOpen(breaker[0], self._admission.circuit_delay(breaker[0]))
        return Raised(error, called=job.called)

    def _log_to_job(self, job: ClaimedJob, attempt: Attempt, error: BaseException) -> None:
        assert attempt.logger is not None
        try:
            message = self._sanitizer.sanitize(error)
            logged = self._codec.loggable_error(job.entity, message)
            attempt.logger.get().error(f"attempt {job.entity.attempt} failed: {logged}")
        except Exception:  # noqa: BLE001 - the job's own log is best effort
            _log.debug("logging the failure of job %s to its logger failed", job.entity.id)

    def decide(self, job: ClaimedJob, happened: Happened) -> Outcome:
        """The outcome of ``happened`` to ``job`` (``outcome.decide`` with the job's values)."""
        entity = job.entity
        backoff = None
        if isinstance(happened, Raised):
            try:
                backoff = decode_backoff(entity.backoff)
            except Exception:  # noqa: BLE001 - fall back to the default backoff
                _log.warning("job %s has an unreadable backoff; using the default", entity.id)
        sanitizer = self._sanitizer
        sanitized: list[tuple[BaseException, str]] = []

        def sanitize(exc: BaseException) -> str:
            text = sanitizer.sanitize(exc)
            if isinstance(text, str):
                text = storable_text(text)  # a NUL byte: no store refuses the failure write
                sanitized.append((exc, text))
            return text

        def trace(exc: BaseException) -> str:
            # the traceback ends with the message just sanitized: not sanitized twice
            known = [text for error, text in sanitized if error is exc]
            text = sanitized_traceback(exc, sanitizer, message=known[0] if known else None)
            return storable_text(text)

        return decide(
            happened,
            attempt=entity.attempt,
            max_retries=entity.max_retries,
            backoff=backoff,
            retry_policy=self._retry_policy,
            sanitize=sanitize,
            trace=trace,
        )

    # ------------------------------------------------------------ hand-over

    def finish(self, job: ClaimedJob, outcome: Outcome) -> ClaimedJob | None:
        """Hand ``outcome`` to the completer (once per claim: a job already handed over, such
        as one requeued at shutdown while it still ran, is left alone); returns the next job
        waiting for the slot this one freed."""
        return self.hand(job, outcome)[1]

    def hand(self, job: ClaimedJob, outcome: Outcome) -> tuple[bool, ClaimedJob | None]:
        """:meth:`finish`, also saying whether the outcome was taken. The hand-over is decided
        first (``ClaimedJobs.hand_over``); only a taken outcome is reported (metrics, the
        failure log, the shutdown warning) and written, so a second finish of one claim
        reports nothing that did not happen."""
        entity = job.entity
        item = self._pending(job, outcome)
        handed, following = self._table.hand_over(job, released=outcome.kind is OutcomeKind.RELEASE)
        if not handed:
            return False, following
        # finished (or given back): a noted started mark not yet written is not needed
        self._marks.forget(entity.id, entity.claim_seq)
        try:
            self._report(job, outcome)
        except Exception:  # noqa: BLE001 - reporting must not strand a handed-over outcome
            _log.exception("reporting the outcome of job %s failed", entity.id)
        try:
            completer = self._completer()
            if completer is None:  # pragma: no cover - the worker built it before claiming
                _log.error("job %s: no completer; it stays RUNNING until recovery", entity.id)
                self._table.written(job)
            elif isinstance(item, PendingCompletion):
                completer.succeed(item)
            else:
                completer.write(item)
        except Exception:  # noqa: BLE001 - the job must not stay in the table unwritten
            _log.exception(
                "job %s: its outcome could not be queued for writing; it stays RUNNING in the "
                "store until recovery",
                entity.id,
            )
            self._table.written(job)
        return True, following

    def drop(self, job: ClaimedJob) -> ClaimedJob | None:
        """Last resort when :meth:`finish` itself raised: ``job`` leaves the table unwritten,
        so it is no longer heartbeated and recovery runs it again (instead of it staying
        RUNNING here forever). Returns the next job waiting for its slot. A job whose outcome
        was handed over already is left to the completer."""
        handed, following = self._table.hand_over(job)
        if handed:
            self._table.written(job)
        return following

    def _pending(self, job: ClaimedJob, outcome: Outcome) -> PendingCompletion | PendingWrite:
        """The write for ``outcome`` (no side effects: :meth:`_report` reports it once it is
        taken)."""
        entity = job.entity
        kind = outcome.kind
        if kind is OutcomeKind.SUCCEEDED:
            return PendingCompletion(
                Completion(job_id=entity.id, claim_seq=entity.claim_seq, result=outcome.result),
                self._record(job, JobStatus.SUCCEEDED, job.elapsed_ms),
                job,
                entity.job_type,
            )
        run_at = None if outcome.delay is None else self._now() + outcome.delay
        if kind in (OutcomeKind.RETRY, OutcomeKind.DEAD_LETTER):
            message = outcome.message or ""
            record = None
            if outcome.cause is not None:  # a refusal at dispatch is no attempt
                record = self._record(job, JobStatus.FAILED, job.elapsed_ms, message, outcome.trace)
            # an encrypted job's error is sealed; a refusal at dispatch is not (its reason
            # names no job data, and the job's key may be what was refused)
            stored = message if outcome.cause is None else self._codec.seal_error(entity, message)
            return PendingWrite(
                entity.id,
                entity.claim_seq,
                stored,
                run_at,
                record=record,
                token=job,
                cause=outcome.cause,
                plain_message=message,
                kind=kind,
                started=job.started_at is not None,
            )
        return PendingWrite(
            entity.id,
            entity.claim_seq,
            outcome.message,
            run_at,
            token=job,
            kind=kind,
            defer_reason=outcome.defer_reason,
            started=kind is OutcomeKind.INTERRUPTED_REQUEUE,
        )

    def _report(self, job: ClaimedJob, outcome: Outcome) -> None:
        """Metrics and logs of an outcome just handed over."""
        entity = job.entity
        kind = outcome.kind
        if kind is OutcomeKind.SUCCEEDED:
            self._metrics.job_completed(entity.id, entity.job_type, job.elapsed_ms)
        elif kind in (OutcomeKind.RETRY, OutcomeKind.DEAD_LETTER):
            message = outcome.message or ""
            self._log_failure(job, outcome, message)
            cause = outcome.cause if outcome.cause is not None else _Refused(message)
            self._metrics.job_failed(entity.id, entity.job_type, cause, entity.attempt)
        elif kind is OutcomeKind.DEFER and outcome.defer_reason is DeferReason.CIRCUIT:
            _log.info(
                "job %s (%s): circuit %r is open; due again in %.1fs (attempt not counted)",
                entity.id,
                entity.target,
                outcome.service,
                outcome.delay.total_seconds() if outcome.delay is not None else 0.0,
            )
        elif kind is OutcomeKind.INTERRUPTED_REQUEUE:
            _log.warning("job %s was still running at shutdown; put back to pending", entity.id)

    def _log_failure(self, job: ClaimedJob, outcome: Outcome, message: str) -> None:
        entity = job.entity
        trace = f"\n{outcome.trace}" if outcome.trace else ""
        if outcome.kind is OutcomeKind.RETRY:
            assert outcome.delay is not None
            _log.warning(
                "job %s (%s): attempt %d failed, retried in %.1fs: %s%s",
                entity.id,
                entity.target,
                entity.attempt,
                outcome.delay.total_seconds(),
                message,
                trace,
            )
        elif outcome.cause is None:
            _log.error("job %s (%s) sent to the dead letter: %s", entity.id, entity.target, message)
        else:
            _log.error(
                "job %s (%s): attempt %d failed, sent to the dead letter: %s%s",
                entity.id,
                entity.target,
                entity.attempt,
                message,
                trace,
            )

    def _record(
        self,
        job: ClaimedJob,
        status: JobStatus,
        elapsed: int,
        message: str | None = None,
        trace: str | None = None,
    ) -> ExecutionRecord | None:
        if not self._audit:
            return None
        entity = job.entity
        return ExecutionRecord(
            job_id=entity.id,
            attempt=entity.attempt,
            node_id=self._node_id,
            status=status,
            started_at=job.started_at or datetime.now(UTC),
            finished_at=datetime.now(UTC),
            duration_ms=elapsed,
            error=None if message is None else self._codec.seal_error(entity, message),
            traceback=None if trace is None else self._codec.seal_error(entity, trace),
        )


__all__ = ["JobRunner"]
