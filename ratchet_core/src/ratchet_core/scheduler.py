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
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import attrs
from loguru import logger

from ratchet_api.errors import (
    InvalidJobError,
    JobNotFoundError,
    StoreError,
    UnsupportedCapabilityError,
)
from ratchet_api.ids import uuid7, uuid7_many
from ratchet_api.model import (
    JobAuthorizationRequest,
    JobDetail,
    JobInvocation,
    JobResult,
    JobStatus,
    utc_now,
)
from ratchet_api.spi.payload import (
    BulkJobInvocationResolver,
    JobInvocationResolver,
    PayloadSerializer,
    TargetLoader,
)
from ratchet_api.spi.policies import ClassPolicy, JobAuthorizationPolicy, PayloadMaskingPolicy
from ratchet_api.spi.runtime import (
    AfterCommitRegistrar,
    AfterCommitResult,
    ClusterCoordinator,
    MetricsCollector,
    NodeIdentityProvider,
    RatchetConfig,
    RatchetConfigKey,
)
from ratchet_api.store.entities import JobEntity, JobQuery, RecurringJobEntity
from ratchet_api.store.protocols import JobQueryStore, JobStore
from ratchet_api.workflow import Condition, ConditionTest, SignalDecision
from ratchet_core._job_copies import job_copies
from ratchet_core.authorization import effective_policy
from ratchet_core.batches import BatchBuilder, BatchTracker
from ratchet_core.builder import DefaultJobBuilder, JobOptions, check_at, check_delay
from ratchet_core.bulk import BulkAction, BulkResult, run_bulk
from ratchet_core.codec import PayloadCodec
from ratchet_core.config import parse_int, register_key
from ratchet_core.defaults.security import DefaultPayloadMaskingPolicy
from ratchet_core.detail import JobDetailReader
from ratchet_core.invocation import sign_invocation
from ratchet_core.limits import Limits
from ratchet_core.masking import MASK_PAYLOADS, PayloadMasker
from ratchet_core.payload import encode_backoff, encode_invocation, encode_invocations
from ratchet_core.properties import put_properties
from ratchet_core.recurring.service import RecurringService
from ratchet_core.streaming import InvocationStreamingBatchBuilder, StreamingBatchBuilder
from ratchet_core.tracing import tracing_from_config
from ratchet_core.workflow.plan import (
    WorkflowPlan,
    check_condition_invocation,
    refuse_parent_placeholders,
)
from ratchet_core.workflow.services import WorkflowServices

DEFAULT_MAX_RETRIES = register_key(
    RatchetConfigKey(
        "jobs.default_max_retries",
        parse_int(0, 1000),
        3,
        "Retries after the first attempt for jobs that do not set max_retries.",
    )
)


AFTER_COMMIT_UNAVAILABLE = "after_commit_unavailable"
"""``local_wakeup`` reason when the after-commit hook of an enqueue could not be registered."""


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
        self._resolver = resolver
        # validates submitted invocations (restores every argument) before they are stored
        self._loader = loader if loader is not None else _as_loader(resolver)
        self._serializer = serializer
        self._policy = class_policy
        self._after_commit = after_commit
        self._cluster = cluster
        self._node_identity = node_identity
        self._metrics = metrics
        self.codec = codec if codec is not None else PayloadCodec.disabled()
        """Seals payloads of encrypted jobs and opens stored values (``ratchet_core.codec``)."""
        self.details = JobDetailReader(
            store,
            self.codec,
            PayloadMasker(
                masking_policy or DefaultPayloadMaskingPolicy(), enabled=settings.get(MASK_PAYLOADS)
            ),
        )
        """The readable, masked views of ``detail()`` and the CLI (``ratchet_core.detail``)."""
        self._authorization = effective_policy(authorization)
        self._default_max_retries = settings.get(DEFAULT_MAX_RETRIES)
        self._tracing = tracing_from_config(settings)
        self._limits = Limits.from_settings(settings)  # payload size (ratchet_core.limits)
        self._listeners: list[Callable[[], None]] = []
        self._listeners_lock = threading.Lock()
        self._recurring = RecurringService(
            store=store,
            resolver=resolver,
            default_max_retries=self._default_max_retries,
            wake=self._wake,
        )
        self._workflow = WorkflowServices(store, resolver, class_policy, serializer, metrics)

    @property
    def store(self) -> JobStore:
        return self._store

    @property
    def recurring_jobs(self) -> RecurringService:
        """Recurring definitions: ``get``, ``list``, ``pause``, ``resume``, ``delete``,
        ``trigger_now`` (see :mod:`ratchet_core.recurring`)."""
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
        """A fluent builder for a job running ``fn`` (see :mod:`ratchet_core.builder`)."""
        return DefaultJobBuilder(self, target=fn)

    def batch(self, name: str, /) -> BatchBuilder:
        """A builder for a batch of child jobs with completion callbacks (see
        :mod:`ratchet_core.batches`)."""
        return BatchBuilder(self, name)

    def streaming_batch(
        self, name: str, items: Iterable[Any], factory: Callable[[Any], Any], /
    ) -> StreamingBatchBuilder:
        """A builder for a batch whose children come from ``items`` through ``factory``,
        written chunk by chunk and resumable by name (see :mod:`ratchet_core.streaming`)."""
        return StreamingBatchBuilder(self, name, items, factory)

    def invocation_streaming_batch(self, name: str, /) -> InvocationStreamingBatchBuilder:
        """A streaming batch whose ``.items(items, factory)`` factory returns a prepared
        ``JobInvocation`` per item (the InvocationSubmissionService path)."""
        return InvocationStreamingBatchBuilder(self, name)

    def invocation_job(self, invocation: JobInvocation, /) -> DefaultJobBuilder:
        """A builder for a prepared ``JobInvocation`` (the InvocationSubmissionService path:
        same validation, options and wake-ups as ``job``)."""
        return DefaultJobBuilder(self, invocation=invocation)

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
        options = JobOptions(transaction=transaction)
        now = utc_now()
        items: list[Sequence[Any]] = []
        for index, args in enumerate(arg_tuples):
            if type(args) is not tuple and (  # the common case first: no ABC check
                isinstance(args, (str, bytes)) or not isinstance(args, Sequence)
            ):
                raise InvalidJobError(
                    f"enqueue_many: item {index} must be a tuple of arguments, got {args!r}"
                )
            items.append(args)
        if isinstance(self._resolver, BulkJobInvocationResolver):
            invocations = self._resolver.resolve_many(fn, items)
        else:
            invocations = []
            for index, args in enumerate(items):
                try:
                    invocations.append(self._resolver.resolve(fn, list(args), {}))
                except InvalidJobError as exc:
                    raise type(exc)(f"enqueue_many item {index}: {exc}") from exc
        if invocations:
            refuse_parent_placeholders(invocations[0])  # one target: a job here has no parent
        with self._tracing.enqueue(invocations[0].target if invocations else "", len(items)):
            jobs = self._entities(invocations, options, now)
            if not jobs:
                return []
            store = self._store_for(transaction)
            store.bulk_insert(jobs)
        self._after_write(options, jobs[0])
        return [job.id for job in jobs]

    def _submit(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any],
        kwargs: dict[str, Any],
        options: JobOptions,
    ) -> UUID:
        invocation = self._resolver.resolve(fn, list(args), dict(kwargs))
        with self._tracing.enqueue(invocation.target):
            return self._insert(invocation, options)

    # JobSubmitter (what DefaultJobBuilder calls)
    def submit_job(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any],
        kwargs: dict[str, Any],
        options: JobOptions,
    ) -> UUID:
        return self._submit(fn, args, kwargs, options)

    def submit_job_invocation(self, invocation: JobInvocation, options: JobOptions) -> UUID:
        return self._submit_invocation(invocation, options)

    def resolve_job(
        self, fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]
    ) -> JobInvocation:
        return self._resolver.resolve(fn, list(args), dict(kwargs))

    def check_job_invocation(self, invocation: JobInvocation) -> JobInvocation:
        return self._check_invocation(invocation)

    def workflow_plan(self) -> WorkflowPlan:
        from ratchet_core.workflow.plan import WorkflowPlan

        return WorkflowPlan(self)

    def _submit_invocation(self, invocation: JobInvocation, options: JobOptions) -> UUID:
        checked = self._check_invocation(invocation)
        with self._tracing.enqueue(checked.target):
            return self._insert(checked, options)

    def _check_invocation(self, invocation: JobInvocation) -> JobInvocation:
        if not isinstance(invocation, JobInvocation):
            raise InvalidJobError(f"expected a JobInvocation, got {type(invocation).__name__}")
        if self._loader is not None:
            invocation = sign_invocation(self._loader, invocation)  # dispatch requires one
            loaded = self._loader.load(invocation)
            # restores every argument from the hints: bad payloads fail here, not in a worker
            self._loader.bind_arguments(loaded, invocation, None)
        else:
            encode_invocation(invocation)
        return invocation

    def _entity(
        self, invocation: JobInvocation, options: JobOptions, now: datetime, **extra: Any
    ) -> JobEntity:
        """The job to store; ``extra`` sets further entity fields (batch children)."""
        job_id = uuid7()
        self._authorize(job_id, invocation, options)
        payload = self._tracing.stamp(encode_invocation(invocation))
        self._limits.check_payload(payload, invocation)
        if options.encrypted or self.codec.encrypt_all:
            payload = self.codec.seal_payload(payload, job_id)
        return self._new_entity(
            job_id, target=invocation.target, payload=payload, options=options, now=now, extra=extra
        )

    def _entities(
        self,
        invocations: Sequence[JobInvocation],
        options: JobOptions,
        now: datetime,
        **extra: Any,
    ) -> list[JobEntity]:
        """``[self._entity(i, options, now, **extra) for i in invocations]``, with the per-job
        work cut to what differs between the jobs (``extra``: further fields, the same for
        every job, such as a batch child's ``job_type`` and ``batch_id``).

        Everything but the id and the payload is the same for every job, so it is computed and
        validated once: the first job goes through ``JobEntity``'s initializer (every converter
        and validator), the others are copies of it with their own id and payload
        (``ratchet_core._job_copies``). Ids are drawn together and payloads encoded in one pass;
        authorization and encryption still apply to each job."""
        if not invocations:
            return []
        ids = uuid7_many(len(invocations))
        for job_id, invocation in zip(ids, invocations, strict=True):
            self._authorize(job_id, invocation, options)
        payloads = encode_invocations(invocations)
        self._limits.check_payloads(payloads, invocations)
        if self._tracing.enabled:
            payloads = [self._tracing.stamp(payload) for payload in payloads]
        if options.encrypted or self.codec.encrypt_all:
            payloads = [
                self.codec.seal_payload(payload, job_id)
                for payload, job_id in zip(payloads, ids, strict=True)
            ]
        target = invocations[0].target
        first = self._new_entity(
            ids[0], target=target, payload=payloads[0], options=options, now=now, extra=extra
        )
        if any(invocation.target != target for invocation in invocations):
            return [
                first,
                *(
                    attrs.evolve(first, id=job_id, payload=payload, target=invocation.target)
                    for job_id, payload, invocation in zip(
                        ids[1:], payloads[1:], invocations[1:], strict=True
                    )
                ),
            ]
        return [first, *job_copies(first, ids[1:], payloads[1:])]

    def _authorize(self, job_id: UUID, invocation: JobInvocation, options: JobOptions) -> None:
        if self._authorization is not None:
            self._authorization.check_create(
                JobAuthorizationRequest(
                    job_id=job_id,
                    invocation=invocation,
                    tags=options.tags,
                    properties=dict(options.properties),
                    priority=options.priority,
                    execution_target=options.execution_target,
                )
            )

    def _new_entity(
        self,
        job_id: UUID,
        *,
        target: str,
        payload: str,
        options: JobOptions,
        now: datetime,
        extra: dict[str, Any],
    ) -> JobEntity:
        scheduled = options.run_at or (now + options.delay if options.delay else now)
        max_retries = (
            options.max_retries if options.max_retries is not None else self._default_max_retries
        )
        return JobEntity(
            id=job_id,
            status=JobStatus.PENDING,
            priority=options.priority,
            target=target,
            payload=payload,
            scheduled_at=scheduled,
            created_at=now,
            updated_at=now,
            max_retries=max_retries,
            backoff=encode_backoff(options.backoff),
            execution_target=options.execution_target,
            tags=options.tags,
            resource_key=options.resource_key,
            flow_control=options.flow.encode(),
            **{"idempotency_key": options.idempotency_key, **extra},
        )

    def _insert(self, invocation: JobInvocation, options: JobOptions) -> UUID:
        refuse_parent_placeholders(invocation)
        job = self._entity(invocation, options, utc_now())
        store = self._store_for(options.transaction)
        stored = store.insert_job(job)
        if stored.id != job.id:
            # the idempotency key was used before: the first job stands, nothing was written
            return stored.id
        if options.properties:
            put_properties(store, job.id, options.properties)
        self._after_write(options, job)
        return job.id

    def _store_for(self, transaction: object | None) -> JobStore:
        if transaction is None:
            return self._store
        try:
            return self._store.joined(transaction)
        except StoreError as exc:
            raise InvalidJobError(f"job option 'transaction': {exc}") from exc

    # ------------------------------------------------------------ wake-ups

    def add_local_wakeup_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (fast, thread safe) whenever this process creates or releases work
        that is due now, after the creating transaction committed."""
        with self._listeners_lock:
            self._listeners.append(listener)

    def remove_local_wakeup_listener(self, listener: Callable[[], None]) -> None:
        with self._listeners_lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _after_write(self, options: JobOptions, job: JobEntity) -> None:
        if options.run_at is not None or options.delay:
            return  # not due now: polling picks it up when it is
        priority, target = job.priority, job.execution_target

        def wake() -> None:
            self._wake(priority, target, inserted=True)

        if options.transaction is None:
            wake()
            return
        result = self._after_commit.register_after_commit(wake, options.transaction)
        if result is AfterCommitResult.NO_ACTIVE_TRANSACTION:
            wake()
        elif result is AfterCommitResult.REGISTRATION_FAILED:
            logger.warning(
                "job {}: the after-commit hook could not be registered on {} (the "
                "AfterCommitRegistrar does not know it); no wake-up, the job is found by polling",
                job.id,
                type(options.transaction).__name__,
            )
            self._metrics.local_wakeup(AFTER_COMMIT_UNAVAILABLE)

    def _wake(self, priority: int, execution_target: str | None, *, inserted: bool = False) -> None:
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener()
            except Exception as exc:  # noqa: BLE001 - a broken listener must not fail the enqueue
                logger.warning("local wake-up listener {!r} failed: {!r}", listener, exc)
        if listeners:
            self._metrics.local_wakeup("enqueue")
        if inserted and getattr(self._cluster, "database_notifies_inserts", False):
            return  # the store's database announces the insert itself, at commit
        try:
            identity = self._node_identity.identity()
            self._cluster.notify_new_work(priority, identity, execution_target)
            self._metrics.cluster_wakeup_published(identity.node_id, execution_target or "")
        except Exception as exc:  # noqa: BLE001 - best effort: polling still finds the job
            logger.warning("cluster wake-up failed: {!r}", exc)

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
        """The readable view of a job (see ``ratchet_core.detail``): arguments, result and
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
        check_condition_invocation(self, invocation)
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
        """``retry`` every FAILED job matching ``query`` (see :mod:`ratchet_core.bulk`); with
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


__all__ = ["DEFAULT_MAX_RETRIES", "SchedulerService"]
