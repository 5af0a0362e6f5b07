"""The enqueue pipeline: the one path from an enqueue request to the written row.

Every kind of job is created here: ``enqueue``, ``schedule``, ``enqueue_in``,
``enqueue_invocation``, ``enqueue_many``, the job builder (and through it the
``InvocationSubmissionService``, the integrations' ``submit_job``, the Django Tasks backend and
``ratchet enqueue``), batches and streaming batches, every node of a workflow (``then``,
``branch``, ``on_success``, ``on_failure``, ``await_signal``) and the jobs a recurring
definition fires. The steps, in order, each in one method:

1. **resolve and check the target** (:meth:`EnqueuePipeline.resolve`,
   :meth:`~EnqueuePipeline.resolve_many`, :meth:`~EnqueuePipeline.check_invocation`): the
   ``JobInvocationResolver`` vets the target and arguments against the ``ClassPolicy``; a
   prepared invocation is signed and every argument restored from its hint by the
   ``TargetLoader``; :func:`refuse_parent_placeholders` refuses a job without a parent that
   asks for its parent's outcome; branch conditions are checked by
   :meth:`~EnqueuePipeline.check_predicate` and :meth:`~EnqueuePipeline.condition_value`;
2. **bind and serialize** the arguments (``payload.encode_invocations``: one pass for a bulk)
   and check what was serialized (``limits``: payload size, lone surrogates);
3. **stamp the trace context** of the enqueue span into the payload document;
4. **assign the final job id** (drawn here, or given by the caller that links jobs before they
   are written: a workflow's nodes, a batch's callbacks), then **authorize** the job with it;
5. **seal** each protected value under its surface and that final id (the payload; the
   condition of a workflow branch under ``PREDICATE``; a recurring template under its own
   derived id), so that the associated data of every envelope matches the row it is stored in;
6. **build the entity**: the first job of a bulk through ``JobEntity``'s initializer (every
   validator), the others as copies that differ in id and payload (``_job_copies``);
7. **hand it to the store**: one ``insert_job``, one ``bulk_insert`` (a large
   ``enqueue_many`` to a ``StreamingBulkStore``: its parts, steps 2 to 6 run per part while
   the store writes the previous one), the caller's transaction (``store_for``), then wake-ups
   (at once, or after the caller's commit).

Authoring modules (``builder``, ``batches``, ``streaming``, ``workflow.plan``) depend only on
the small :class:`Submitter` protocol, never on ``SchedulerService``; ``SchedulerService``
builds one :class:`EnqueuePipeline` and delegates every creation to it. Thread safe.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any
from uuid import UUID

import attrs
from loguru import logger

from ratchet_api.errors import ClassNotAllowedError, InvalidJobError, PayloadError, StoreError
from ratchet_api.ids import uuid7_many
from ratchet_api.model import JobAuthorizationRequest, JobInvocation, JobStatus, utc_now
from ratchet_api.spi.payload import (
    BulkJobInvocationResolver,
    JobInvocationResolver,
    PayloadSerializer,
    TargetLoader,
)
from ratchet_api.spi.policies import ClassPolicy, JobAuthorizationPolicy
from ratchet_api.spi.runtime import (
    AfterCommitRegistrar,
    AfterCommitResult,
    ClusterCoordinator,
    MetricsCollector,
    NodeIdentityProvider,
)
from ratchet_api.store.entities import JobEntity
from ratchet_api.store.protocols import FairClaimStore, JobStore, StreamingBulkStore
from ratchet_core.defaults.authorization import effective_policy
from ratchet_core.enqueue._gc import collector_paused
from ratchet_core.enqueue._job_copies import job_copies
from ratchet_core.enqueue.invocation import sign_invocation
from ratchet_core.enqueue.options import JobOptions
from ratchet_core.enqueue.properties import put_properties
from ratchet_core.enqueue.submitter import Submitter, refuse_parent_placeholders
from ratchet_core.observability.tracing import Tracing
from ratchet_core.payload.codec import PayloadCodec
from ratchet_core.payload.forms import encode_backoff, encode_invocation, encode_invocations
from ratchet_core.payload.limits import Limits
from ratchet_core.payload.serialization import value_classes

_ITEM = re.compile(r"item (\d+): (.*)", re.DOTALL)
"""An error of a bulk resolver naming its item: ``item <index>: <message>``."""

STREAM_PART = 500
"""Jobs per part of a bulk enqueue written to a ``StreamingBulkStore`` (about 2 ms of building
each: the store writes the first part while the second is built)."""

AFTER_COMMIT_UNAVAILABLE = "after_commit_unavailable"
"""``local_wakeup`` reason when the after-commit hook of an enqueue could not be registered."""


class EnqueuePipeline:
    """Implements :class:`Submitter` (see the module docstring). Thread safe."""

    def __init__(
        self,
        *,
        store: JobStore,
        resolver: JobInvocationResolver,
        serializer: PayloadSerializer,
        class_policy: ClassPolicy,
        after_commit: AfterCommitRegistrar,
        cluster: ClusterCoordinator,
        node_identity: NodeIdentityProvider,
        metrics: MetricsCollector,
        codec: PayloadCodec,
        tracing: Tracing,
        default_max_retries: int,
        loader: TargetLoader | None = None,
        authorization: JobAuthorizationPolicy | None = None,
        limits: Limits | None = None,
    ) -> None:
        self._store = store
        self._resolver = resolver
        # validates submitted invocations (restores every argument) before they are stored
        self._loader = loader
        self._serializer = serializer
        self._policy = class_policy
        self._after_commit = after_commit
        self._cluster = cluster
        self._node_identity = node_identity
        self._metrics = metrics
        self._codec = codec
        self._tracing = tracing
        self._default_max_retries = default_max_retries
        self._authorization = effective_policy(authorization)
        self._limits = limits if limits is not None else Limits()  # payload size and text
        self._listeners: list[Callable[[], None]] = []
        self._listeners_lock = threading.Lock()
        self._fairness_checked = False

    @property
    def store(self) -> JobStore:
        return self._store

    @property
    def codec(self) -> PayloadCodec:
        return self._codec

    @property
    def default_max_retries(self) -> int:
        return self._default_max_retries

    # ------------------------------------------------------------ 1. resolve and check

    def resolve(
        self, fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]
    ) -> JobInvocation:
        return self._resolver.resolve(fn, list(args), dict(kwargs))

    def resolve_many(
        self, fn: Callable[..., Any], items: Sequence[Sequence[Any]], first: int = 0
    ) -> list[JobInvocation]:
        """One invocation per argument tuple; an error names its item, counted from
        ``first`` (the position of ``items[0]`` in a bulk resolved in parts)."""
        if isinstance(self._resolver, BulkJobInvocationResolver):
            try:
                return list(self._resolver.resolve_many(fn, items))
            except (InvalidJobError, PayloadError) as exc:
                numbered = _ITEM.match(str(exc))
                if not first or numbered is None:
                    raise
                index, rest = int(numbered[1]) + first, numbered[2]
                raise type(exc)(f"item {index}: {rest}") from exc
        invocations = []
        for index, args in enumerate(items, first):
            try:
                invocations.append(self._resolver.resolve(fn, list(args), {}))
            except InvalidJobError as exc:
                raise type(exc)(f"item {index}: {exc}") from exc
        return invocations

    def check_invocation(self, invocation: Any) -> JobInvocation:
        if not isinstance(invocation, JobInvocation):
            raise InvalidJobError(f"expected a JobInvocation, got {type(invocation).__name__}")
        checked: JobInvocation = invocation
        if self._loader is not None:
            checked = sign_invocation(self._loader, checked)  # dispatch requires one
            loaded = self._loader.load(checked)
            # restores every argument from the hints: bad payloads fail here, not in a worker
            self._loader.bind_arguments(loaded, checked, None)
        else:
            encode_invocation(checked)
        return checked

    def check_predicate(self, function: Callable[..., bool], args: Sequence[Any]) -> JobInvocation:
        """A stored form of ``predicate(function, *args)``: checked as a job target is
        (importable, public, allowed by the ``ClassPolicy``), and static (a module-level
        function or a static method: no container instance)."""
        describe = getattr(self._resolver, "describe", None)
        if describe is None:
            raise InvalidJobError(
                f"{type(self._resolver).__name__} cannot check branch predicates (it needs "
                "describe())"
            )
        info = describe(function)
        if not info.static:
            raise InvalidJobError(
                f"branch predicate {info.target} must be a module-level function or static method"
            )
        if not self._policy.is_allowed(info.dotted):
            raise ClassNotAllowedError(info.dotted, "branch predicate")
        converted = []
        for value in args:
            for name in value_classes(value):
                if not self._policy.is_allowed(name):
                    raise ClassNotAllowedError(name, f"argument of branch predicate {info.target}")
            converted.append(self._serializer.to_json_value(value))
        if len(args) >= len(info.parameters):
            raise InvalidJobError(
                f"branch predicate {info.target}{info.signature} takes the parent's JobResult "
                f"as its last argument: {len(args)} arguments leave no room for it"
            )
        return JobInvocation(
            module=info.module,
            qualname=info.qualname,
            static=True,
            signature=info.signature,
            args=tuple(converted),
        )

    def check_condition(self, invocation: JobInvocation) -> JobInvocation:
        from ratchet_core.features.workflow.settle import load_function

        if not isinstance(invocation, JobInvocation):
            raise InvalidJobError(f"expected a JobInvocation, got {type(invocation).__name__}")
        named = f"{invocation.module}.{invocation.qualname}"
        if not self._policy.is_allowed(named):  # judged before importing anything
            raise ClassNotAllowedError(named, "branch predicate")
        try:
            function = load_function(invocation)
        except (ImportError, AttributeError) as exc:
            raise InvalidJobError(
                f"branch predicate {invocation.target} cannot be imported: {exc}"
            ) from exc
        return self.check_predicate(function, tuple(invocation.args))

    def condition_value(self, option: str, value: Any) -> Any:
        for name in value_classes(value):
            if not self._policy.is_allowed(name):
                raise ClassNotAllowedError(name, f"value of branch condition {option}")
        return self._serializer.to_json_value(value)

    # ------------------------------------------------------------ 2-6. the entities

    def new_ids(self, count: int) -> list[UUID]:
        return uuid7_many(count) if count else []

    def encrypts(self, options: JobOptions) -> bool:
        """True when jobs with ``options`` are sealed (``.encrypted()`` or mode ``all``)."""
        return options.encrypted or self._codec.encrypt_all

    def entity(
        self,
        invocation: JobInvocation,
        options: JobOptions,
        now: datetime,
        *,
        job_id: UUID | None = None,
        **extra: Any,
    ) -> JobEntity:
        """One job (see :meth:`entities`)."""
        ids = None if job_id is None else [job_id]
        return self.entities([invocation], options, now, ids=ids, **extra)[0]

    def entities(
        self,
        invocations: Sequence[JobInvocation],
        options: JobOptions,
        now: datetime,
        *,
        ids: Sequence[UUID] | None = None,
        item_offset: int = 0,
        **extra: Any,
    ) -> list[JobEntity]:
        """The jobs to store, ``extra`` setting further fields of every job (a batch child's
        ``job_type`` and ``batch_id``, a workflow node's status and parent). ``item_offset``
        is the position of the first invocation in a bulk enqueue built in parts (errors
        name the item by its position in the whole bulk).

        Everything but the id and the payload is the same for every job, so it is computed and
        validated once: the first job goes through ``JobEntity``'s initializer (every converter
        and validator), the others are copies of it with their own id and payload
        (``ratchet_core.enqueue._job_copies``). Ids are drawn together and payloads encoded in one pass;
        authorization and sealing (under each job's final id) still apply to each job."""
        if not invocations:
            return []
        if ids is None:
            ids = uuid7_many(len(invocations))
        elif len(ids) != len(invocations):
            raise ValueError(f"{len(ids)} ids for {len(invocations)} invocations")
        if self._authorization is not None:
            for job_id, invocation in zip(ids, invocations, strict=True):
                self._authorize(job_id, invocation, options)
        payloads = encode_invocations(invocations)
        # size, lone surrogates (C's checks)
        self._limits.check_payloads(payloads, invocations, item_offset)
        if self._tracing.enabled:
            payloads = [self._tracing.stamp(payload) for payload in payloads]
        if self.encrypts(options):
            seal = self._codec.seal_payload
            payloads = [
                seal(payload, job_id) for payload, job_id in zip(payloads, ids, strict=True)
            ]
        target = invocations[0].target
        first = self._new_entity(
            ids[0], target=target, payload=payloads[0], options=options, now=now, extra=extra
        )
        if len(invocations) == 1:  # a single enqueue: no copies to set up
            return [first]
        if any(i.target != target for i in invocations):
            return [
                first,
                *(
                    attrs.evolve(first, id=job_id, payload=payload, target=invocation.target)
                    for job_id, payload, invocation in zip(
                        ids[1:], payloads[1:], invocations[1:], strict=True
                    )
                ),
            ]
        return [first, *job_copies(first, list(ids[1:]), payloads[1:])]

    def _authorize(self, job_id: UUID, invocation: JobInvocation, options: JobOptions) -> None:
        assert self._authorization is not None
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

    def _check_fairness(self) -> None:
        """The engine's fallback for a store without ``FairClaimStore``: the key is stored
        (where the store keeps it) but claims keep the plain order; said once."""
        self._fairness_checked = True
        if self._store.capability(FairClaimStore) is None:
            logger.warning(
                "{} does not advertise FairClaimStore: jobs with a fairness_key are claimed "
                "in the plain order (priority, due time), so one key's backlog delays the "
                "others; see docs/scaling.md (Fairness)",
                type(self._store).__name__,
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
        if options.fairness_key is not None and not self._fairness_checked:
            self._check_fairness()
        max_retries = (
            options.max_retries if options.max_retries is not None else self._default_max_retries
        )
        fields: dict[str, Any] = {
            "status": JobStatus.PENDING,
            "scheduled_at": scheduled,
            "idempotency_key": options.idempotency_key,
            **extra,
        }
        return JobEntity(
            id=job_id,
            priority=options.priority,
            target=target,
            payload=payload,
            created_at=now,
            updated_at=now,
            max_retries=max_retries,
            backoff=encode_backoff(options.backoff),
            execution_target=options.execution_target,
            tags=options.tags,
            resource_key=options.resource_key,
            fairness_key=options.fairness_key,
            flow_control=options.flow.encode(),
            **fields,
        )

    def seal_condition(self, expression: str, child: JobEntity) -> str:
        if not self._codec.is_encrypted(child):
            return expression
        return self._codec.seal_condition(expression, child.id)

    def seal_fired(self, job: JobEntity, template_invocation: str, recurring_id: str) -> JobEntity:
        """A job fired by the recurring definition ``recurring_id`` (built by
        ``recurring.template.job_for`` with the template's invocation as its payload), its
        payload sealed under the job's own id when the template is sealed or every job is
        encrypted (a sealed template is opened under the definition's derived id first)."""
        if not (self._codec.encrypt_all or self._codec.is_sealed(template_invocation)):
            return job
        text = self._codec.open_template(template_invocation, recurring_id)
        return attrs.evolve(job, payload=self._codec.seal_payload(text, job.id))

    def seal_template(self, invocation: JobInvocation, recurring_id: str) -> str:
        """The stored invocation of a recurring definition's template: sealed under the
        definition's derived id when every job is encrypted."""
        text = encode_invocation(invocation)
        if not self._codec.encrypt_all:
            return text
        return self._codec.seal_template(text, recurring_id)

    # ------------------------------------------------------------ 7. the store

    def enqueue_span(self, target: str, count: int = 1) -> AbstractContextManager[None]:
        return self._tracing.enqueue(target, count)

    def submit(self, invocation: JobInvocation, options: JobOptions) -> UUID:
        refuse_parent_placeholders(invocation)
        with self._tracing.enqueue(invocation.target):
            job = self.entity(invocation, options, utc_now())
            store = self.store_for(options.transaction)
            stored = store.insert_job(job)
        if stored.id != job.id:
            # the idempotency key was used before: the first job stands, nothing was written
            return stored.id
        if options.properties:
            put_properties(store, job.id, options.properties)
        self.after_write(options, job)
        return job.id

    def submit_many(self, invocations: Sequence[JobInvocation], options: JobOptions) -> list[UUID]:
        """One bulk insert of ``invocations`` (all or none; see :meth:`_submit_bulk`)."""
        return self._submit_bulk(
            len(invocations), lambda start, stop: invocations[start:stop], options
        )

    def enqueue_items(
        self, fn: Callable[..., Any], items: Sequence[Sequence[Any]], options: JobOptions
    ) -> list[UUID]:
        """``resolve_many`` then ``submit_many`` (``enqueue_many``); a bulk written in parts
        resolves each part as it builds it (an error still names the item in the whole
        bulk, ``enqueue_many item <n>: ...``, and nothing is written)."""

        def resolve(start: int, stop: int) -> list[JobInvocation]:
            try:
                return self.resolve_many(fn, items[start:stop], start)
            except InvalidJobError as exc:
                if str(exc).startswith("item "):
                    raise type(exc)(f"enqueue_many {exc}") from exc
                raise

        return self._submit_bulk(len(items), resolve, options)

    def _submit_bulk(
        self,
        count: int,
        invocations: Callable[[int, int], Sequence[JobInvocation]],
        options: JobOptions,
    ) -> list[UUID]:
        """One bulk insert of ``count`` jobs, ``invocations(start, stop)`` giving those of
        positions ``start`` to ``stop`` (all or none). A bulk of more than ``STREAM_PART``
        jobs outside a caller's transaction goes to a store with ``StreamingBulkStore`` in
        parts resolved and built one after the other, so the store writes a part (PostgreSQL:
        the server inserts and indexes it) while the next is built; a job refused in a later
        part still leaves nothing written. Otherwise every job is built, then one
        ``bulk_insert``."""
        if not count:
            return []
        store = self.store_for(options.transaction)
        streaming = None
        if count > STREAM_PART and options.transaction is None:
            streaming = store.capability(StreamingBulkStore)
        head = invocations(0, STREAM_PART if streaming is not None else count)
        refuse_parent_placeholders(head[0])  # one target: a job here has no parent
        with self._tracing.enqueue(head[0].target, count), collector_paused(count):
            now = utc_now()
            if streaming is None:
                jobs = self.entities(head, options, now)
                store.bulk_insert(jobs)
                first, ids = jobs[0], [job.id for job in jobs]
            else:
                built: list[JobEntity] = []

                def parts() -> Iterator[list[JobEntity]]:
                    part = head
                    for start in range(0, count, STREAM_PART):
                        if start:
                            part = invocations(start, min(start + STREAM_PART, count))
                        jobs = self.entities(part, options, now, item_offset=start)
                        built.extend(jobs)
                        yield jobs

                streaming.bulk_insert_parts(parts())
                first, ids = built[0], [job.id for job in built]
        self.after_write(options, first)
        return ids

    def store_for(self, transaction: object | None) -> JobStore:
        if transaction is None:
            return self._store
        try:
            return self._store.joined(transaction)
        except StoreError as exc:
            raise InvalidJobError(f"job option 'transaction': {exc}") from exc

    # ------------------------------------------------------------ wake-ups

    def add_listener(self, listener: Callable[[], None]) -> None:
        with self._listeners_lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[], None]) -> None:
        with self._listeners_lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def after_write(self, options: JobOptions, job: JobEntity) -> None:
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

    def after_commit(self, action: Callable[[], None], transaction: object | None) -> None:
        if transaction is None:
            action()
            return
        result = self._after_commit.register_after_commit(action, transaction)
        if result is AfterCommitResult.NO_ACTIVE_TRANSACTION:
            action()
        # REGISTRATION_FAILED: the workers' sweeps do it later

    def wake(self, priority: int, execution_target: str | None) -> None:
        self._wake(priority, execution_target)

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

    def signal_waiting(self, job: JobEntity) -> None:
        if job.signal_key is not None:
            self._metrics.signal_waiting(job.id, job.job_type, job.signal_key)


__all__ = [
    "AFTER_COMMIT_UNAVAILABLE",
    "EnqueuePipeline",
    "Submitter",
    "refuse_parent_placeholders",
]
