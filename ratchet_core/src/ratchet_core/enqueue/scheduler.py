"""``SchedulerService``: the application's entry point for creating and managing jobs.

Get it from the container (``container.scheduler()``). Every job passes the
``JobInvocationResolver`` (target and arguments, ``ClassPolicy``) before anything is written,
so a bad job fails in the caller, never in a worker. With a transaction handle the job is
written in the caller's transaction and wake-ups are deferred to its commit through the
``AfterCommitRegistrar``; without one the store commits the job at once and workers are woken
right away (in this process through local listeners, elsewhere through the
``ClusterCoordinator``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from ratchet_api.errors import InvalidJobError, JobNotFoundError, UnsupportedCapabilityError
from ratchet_api.model import JobDetail, JobInvocation, JobResult, JobStatus
from ratchet_api.spi.payload import JobInvocationResolver, PayloadSerializer, TargetLoader
from ratchet_api.spi.policies import ClassPolicy, JobAuthorizationPolicy, PayloadMaskingPolicy
from ratchet_api.spi.runtime import (
    AfterCommitRegistrar,
    ClusterCoordinator,
    MetricsCollector,
    NodeIdentityProvider,
    RatchetConfig,
    RatchetConfigKey,
)
from ratchet_api.store.entities import JobEntity, JobQuery, RecurringJobEntity
from ratchet_api.store.protocols import JobQueryStore, JobStore
from ratchet_api.workflow import Condition, ConditionTest, SignalDecision
from ratchet_core.defaults.security import DefaultPayloadMaskingPolicy
from ratchet_core.enqueue._gc import collector_paused
from ratchet_core.enqueue.builder import DefaultJobBuilder
from ratchet_core.enqueue.bulk import BulkAction, BulkResult, run_bulk
from ratchet_core.enqueue.options import JobOptions, check_at, check_delay
from ratchet_core.enqueue.pipeline import AFTER_COMMIT_UNAVAILABLE, EnqueuePipeline
from ratchet_core.features.batches import BatchBuilder, BatchTracker
from ratchet_core.features.recurring.service import RecurringService
from ratchet_core.features.streaming import InvocationStreamingBatchBuilder, StreamingBatchBuilder
from ratchet_core.features.workflow.services import WorkflowServices
from ratchet_core.observability.tracing import tracing_from_config
from ratchet_core.payload.codec import PayloadCodec
from ratchet_core.payload.detail import JobDetailReader
from ratchet_core.payload.limits import Limits
from ratchet_core.payload.masking import MASK_PAYLOADS, PayloadMasker
from ratchet_core.runtime.config import parse_int, register_key

DEFAULT_MAX_RETRIES = register_key(
    RatchetConfigKey(
        "jobs.default_max_retries",
        parse_int(0, 1000),
        3,
        "Retries after the first attempt for jobs that do not set max_retries.",
    )
)


def _as_loader(resolver: JobInvocationResolver) -> TargetLoader | None:
    return resolver if isinstance(resolver, TargetLoader) else None


class SchedulerService:
    """Implements ``ratchet_api.JobScheduler``. Thread safe."""

    def __init__(
        self,
        *,
        store: JobStore,
        settings: RatchetConfig,
        resolver: JobInvocationResolver,
        serializer: PayloadSerializer,
        class_policy: ClassPolicy,
        after_commit: AfterCommitRegistrar,
        cluster: ClusterCoordinator,
        node_identity: NodeIdentityProvider,
        metrics: MetricsCollector,
        loader: TargetLoader | None = None,
        codec: PayloadCodec | None = None,
        masking_policy: PayloadMaskingPolicy | None = None,
        authorization: JobAuthorizationPolicy | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._metrics = metrics
        self.codec = codec if codec is not None else PayloadCodec.disabled()
        """Seals payloads of encrypted jobs and opens stored values (``ratchet_core.payload.codec``)."""
        self.details = JobDetailReader(
            store,
            self.codec,
            PayloadMasker(
                masking_policy or DefaultPayloadMaskingPolicy(), enabled=settings.get(MASK_PAYLOADS)
            ),
        )
        """The readable, masked views of ``detail()`` and the CLI (``ratchet_core.payload.detail``)."""
        self.pipeline = EnqueuePipeline(
            store=store,
            resolver=resolver,
            # validates submitted invocations (restores every argument) before they are stored
            loader=loader if loader is not None else _as_loader(resolver),
            serializer=serializer,
            class_policy=class_policy,
            after_commit=after_commit,
            cluster=cluster,
            node_identity=node_identity,
            metrics=metrics,
            codec=self.codec,
            tracing=tracing_from_config(settings),
            default_max_retries=settings.get(DEFAULT_MAX_RETRIES),
            authorization=authorization,
            limits=Limits.from_settings(settings),  # payload size (ratchet_core.payload.limits)
        )
        """Every job is created by this pipeline (``ratchet_core.enqueue.pipeline``)."""
        self._recurring = RecurringService(
            store=store,
            resolver=resolver,
            default_max_retries=self.pipeline.default_max_retries,
            wake=self.pipeline.wake,
            pipeline=self.pipeline,
        )
        self._workflow = WorkflowServices(
            store, resolver, class_policy, serializer, metrics, codec=self.codec
        )

    @property
    def store(self) -> JobStore:
        return self._store

    @property
    def recurring_jobs(self) -> RecurringService:
        """Recurring definitions: ``get``, ``list``, ``pause``, ``resume``, ``delete``,
        ``trigger_now`` (see :mod:`ratchet_core.features.recurring`)."""
        return self._recurring

    def recurring(
        self,
        recurring_id: str,
        cron: str | timedelta | None,
        fn: Callable[..., Any],
        /,
        *args: Any,
        **options: Any,
    ) -> RecurringJobEntity:
        """Create or update (idempotent) the recurring job ``recurring_id`` running
        ``fn(*args, **kwargs)`` on ``cron`` (5 or 6 fields, ``@daily``-style alias, or a
        timedelta); options: ``tz``, ``misfire`` (``skip``/``fire_once``/``fire_all``),
        ``every``, ``kwargs``, ``priority``, ``tags``, ``max_retries``, ``backoff``,
        ``execution_target``, ``max_instances``. See docs/recurring.md."""
        return self._recurring.declare(recurring_id, cron, fn, *args, **options)

    # ------------------------------------------------------------ creating jobs

    def job(self, fn: Callable[..., Any], /) -> DefaultJobBuilder:
        """A fluent builder for a job running ``fn`` (see :mod:`ratchet_core.enqueue.builder`)."""
        return DefaultJobBuilder(self.pipeline, target=fn)

    def batch(self, name: str, /) -> BatchBuilder:
        """A builder for a batch of child jobs with completion callbacks (see
        :mod:`ratchet_core.features.batches`)."""
        return BatchBuilder(self.pipeline, name)

    def streaming_batch(
        self, name: str, items: Iterable[Any], factory: Callable[[Any], Any], /
    ) -> StreamingBatchBuilder:
        """A builder for a batch whose children come from ``items`` through ``factory``,
        written chunk by chunk and resumable by name (see :mod:`ratchet_core.features.streaming`)."""
        return StreamingBatchBuilder(self.pipeline, name, items, factory)

    def invocation_streaming_batch(self, name: str, /) -> InvocationStreamingBatchBuilder:
        """A streaming batch whose ``.items(items, factory)`` factory returns a prepared
        ``JobInvocation`` per item (the InvocationSubmissionService path)."""
        return InvocationStreamingBatchBuilder(self.pipeline, name)

    def invocation_job(self, invocation: JobInvocation, /) -> DefaultJobBuilder:
        """A builder for a prepared ``JobInvocation`` (the InvocationSubmissionService path:
        same validation, options and wake-ups as ``job``)."""
        return DefaultJobBuilder(self.pipeline, invocation=invocation)

    def enqueue(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> UUID:
        """Run ``fn(*args, **kwargs)`` as soon as a worker is free; returns the job id."""
        return self._submit(fn, args, kwargs, JobOptions())

    def enqueue_in(
        self, transaction: object, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> UUID:
        """``enqueue`` inside the caller's open transaction (a SQLAlchemy ``Connection`` or
        ``Session``, a pymongo ``ClientSession``): a rollback removes the job, wake-ups wait
        for the commit."""
        return self._submit(fn, args, kwargs, JobOptions(transaction=transaction))

    def schedule(
        self,
        at_or_delay: datetime | timedelta | float,
        fn: Callable[..., Any],
        /,
        *args: Any,
        **kwargs: Any,
    ) -> UUID:
        """Run ``fn(*args, **kwargs)`` no earlier than ``at_or_delay``: an aware datetime, or a
        delay as a timedelta or seconds."""
        options = JobOptions()
        if isinstance(at_or_delay, datetime):
            options.run_at = check_at(at_or_delay)
        else:
            options.delay = check_delay(at_or_delay)
        return self._submit(fn, args, kwargs, options)

    def enqueue_invocation(
        self, invocation: JobInvocation, *, transaction: object | None = None
    ) -> UUID:
        """Store a prepared invocation after the same checks a worker applies at dispatch."""
        return self._submit_invocation(invocation, JobOptions(transaction=transaction))

    def enqueue_many(
        self,
        fn: Callable[..., Any],
        arg_tuples: Sequence[Sequence[Any]],
        *,
        transaction: object | None = None,
    ) -> list[UUID]:
        """One job per argument tuple, written with one bulk insert (all or none)."""
        if isinstance(arg_tuples, (str, bytes)):
            raise InvalidJobError("enqueue_many expects a sequence of argument tuples")
        items: list[Sequence[Any]] = []
        for index, args in enumerate(arg_tuples):
            if type(args) is not tuple and (  # the common case first: no ABC check
                isinstance(args, (str, bytes)) or not isinstance(args, Sequence)
            ):
                raise InvalidJobError(
                    f"enqueue_many: item {index} must be a tuple of arguments, got {args!r}"
                )
            items.append(args)
        with collector_paused(len(items)):
            return self.pipeline.enqueue_items(fn, items, JobOptions(transaction=transaction))

    def resolve_job(
        self, fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]
    ) -> JobInvocation:
        """The checked invocation of ``fn`` with these arguments; nothing is stored (the
        pipeline's first step, ``pipeline.resolve``)."""
        return self.pipeline.resolve(fn, args, kwargs)

    def check_job_invocation(self, invocation: JobInvocation) -> JobInvocation:
        """``invocation`` signed and checked as a worker checks it at dispatch; nothing is
        stored (``pipeline.check_invocation``)."""
        return self.pipeline.check_invocation(invocation)

    def _submit(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any],
        kwargs: dict[str, Any],
        options: JobOptions,
    ) -> UUID:
        return self.pipeline.submit(self.pipeline.resolve(fn, args, kwargs), options)

    def _submit_invocation(self, invocation: JobInvocation, options: JobOptions) -> UUID:
        return self.pipeline.submit(self.pipeline.check_invocation(invocation), options)

    # ------------------------------------------------------------ wake-ups

    def add_local_wakeup_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (fast, thread safe) whenever this process creates or releases work
        that is due now, after the creating transaction committed."""
        self.pipeline.add_listener(listener)

    def remove_local_wakeup_listener(self, listener: Callable[[], None]) -> None:
        self.pipeline.remove_listener(listener)

    def _wake(self, priority: int, execution_target: str | None) -> None:
        self.pipeline.wake(priority, execution_target)

    # ------------------------------------------------------------ managing jobs

    def get(self, job_id: UUID) -> JobEntity | None:
        """The stored job, or None."""
        return self._store.find_by_id(job_id)

    def _require(self, job_id: UUID) -> JobEntity:
        job = self._store.find_by_id(job_id)
        if job is None:
            raise JobNotFoundError(job_id)
        return job

    def result(self, job_id: UUID) -> JobResult:
        """The job's status, stored return value (decoded JSON, not restored to a class), error
        and finish time, decrypted for an encrypted job. ``JobNotFoundError`` for an unknown id;
        ``EncryptionError`` (``EncryptionIntegrityError`` for a value moved or altered) when an
        encrypted value cannot be opened."""
        job = self._require(job_id)
        value: Any = None
        text = self.codec.open_result(job)
        if text:
            try:
                value = json.loads(text)
            except ValueError:
                value = text
        return JobResult(
            job_id=job.id,
            status=job.status,
            value=value,
            error=self.codec.open_error(job) if job.status is not JobStatus.SUCCEEDED else None,
            finished_at=job.finished_at,
        )

    def detail(self, job_id: UUID) -> JobDetail | None:
        """The readable view of a job (see ``ratchet_core.payload.detail``): arguments, result and
        error decrypted for an encrypted job, sensitive fields masked when
        ``security.mask_payloads`` is on; None for an unknown id."""
        job = self._store.find_by_id(job_id)
        return None if job is None else self.details.detail(job)

    def search(self, query: JobQuery) -> list[JobEntity]:
        """Jobs matching ``query`` (needs the store's ``JobQueryStore`` capability)."""
        queries = self._store.capability(JobQueryStore)
        if queries is None:
            raise UnsupportedCapabilityError("JobQueryStore", "JobScheduler.search")
        return queries.search_jobs(query)

    def cancel(self, job_id: UUID) -> bool:
        """Cancel a job that has not finished (a running attempt's result is then discarded);
        the steps and callbacks waiting for it are cancelled with the reason. False if it
        already finished; ``JobNotFoundError`` for an unknown id."""
        before = self._store.find_by_id(job_id)
        changed = self._transitioned(job_id, self._store.cancel_job(job_id))
        if changed and before is not None:
            self._workflow.cancelled(before)
            if before.batch_id is not None:  # it may have been the batch's last open child
                BatchTracker(self._store).try_complete(before.batch_id)
        return changed

    # ------------------------------------------------------------ workflows and signals

    def signal(self, target: UUID | str, payload: Any = None) -> SignalDecision:
        """Deliver ``payload`` (any JSON-convertible value) to the job ``target`` (its id) or to
        every job waiting for the signal key ``target``. Exactly one of concurrent signals (and
        of a signal racing the timeout) wins; the ``SignalDecision`` says what happened to each
        job. ``UnsupportedCapabilityError`` without the store's ``SignalStore``."""
        return self._workflow.signals.signal(target, payload)

    def invocation_condition(self, invocation: JobInvocation) -> Condition:
        """A branch condition from a prepared predicate invocation (the
        InvocationSubmissionService seam): its target gets the stored arguments then the
        parent's ``JobResult``, and must return bool. Checked now (``InvalidJobError``)."""
        self.pipeline.check_condition(invocation)
        return Condition(test=ConditionTest.INVOCATION, invocation=invocation)

    def retry(self, job_id: UUID) -> bool:
        """Send a dead-lettered (FAILED) job back to PENDING with its attempts reset. False for
        any other status; ``JobNotFoundError`` for an unknown id."""
        return self._transitioned(job_id, self._store.retry_dead_letter(job_id), wake=True)

    def pause(self, job_id: UUID) -> bool:
        """Hold a PENDING job until resumed. False for any other status."""
        return self._transitioned(job_id, self._store.pause_job(job_id))

    def resume(self, job_id: UUID) -> bool:
        """Release a PAUSED job. False for any other status."""
        return self._transitioned(job_id, self._store.resume_job(job_id), wake=True)

    def delete(self, job_id: UUID) -> bool:
        """Delete a job that is not RUNNING with everything it owns (tags, properties, state,
        executions, logs). False for a running job; ``JobNotFoundError`` for an unknown id."""
        job = self._require(job_id)
        if job.status is JobStatus.RUNNING:
            return False
        return self._store.delete_job(job_id)

    def retry_matching(self, query: JobQuery, *, dry_run: bool = False) -> BulkResult:
        """``retry`` every FAILED job matching ``query`` (see :mod:`ratchet_core.enqueue.bulk`); with
        ``dry_run`` only count them. Needs the ``JobQueryStore`` capability."""
        return run_bulk(
            self._store, BulkAction.RETRY, query, dry_run=dry_run, on_retried=self._wake_all
        )

    def cancel_matching(self, query: JobQuery, *, dry_run: bool = False) -> BulkResult:
        """``cancel`` every unfinished job matching ``query``; with ``dry_run`` only count."""
        return run_bulk(self._store, BulkAction.CANCEL, query, dry_run=dry_run)

    def delete_matching(self, query: JobQuery, *, dry_run: bool = False) -> BulkResult:
        """Delete every job matching ``query`` that is not RUNNING; with ``dry_run`` only
        count."""
        return run_bulk(self._store, BulkAction.DELETE, query, dry_run=dry_run)

    def _wake_all(self, jobs: list[JobEntity]) -> None:
        for priority, target in {(j.priority, j.execution_target) for j in jobs}:
            self._wake(priority, target)

    def _transitioned(self, job_id: UUID, changed: bool, *, wake: bool = False) -> bool:
        """The outcome of a status transition: True if it applied (waking workers when the job
        became due again), False if the job is in another status, ``JobNotFoundError`` if it
        does not exist."""
        if changed:
            if wake and (job := self._store.find_by_id(job_id)) is not None:
                self._wake(job.priority, job.execution_target)
            return True
        self._require(job_id)
        return False


__all__ = ["AFTER_COMMIT_UNAVAILABLE", "DEFAULT_MAX_RETRIES", "SchedulerService"]
