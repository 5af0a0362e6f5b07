"""The user-facing scheduler facade and the context a running job can ask for."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable
from uuid import UUID

from ratchet_api.model import BackoffPolicy, JobDetail, JobInvocation, JobPriority, JobResult
from ratchet_api.spi.runtime import JobLogger
from ratchet_api.store.entities import JobEntity, JobQuery
from ratchet_api.workflow import Condition, SignalDecision, SignalTimeout


@runtime_checkable
class JobContext(Protocol):
    """Handed to a job that declares a parameter annotated ``JobContext`` (the argument is not
    stored; the worker supplies it). Valid only during the execution it was created for."""

    @property
    def job_id(self) -> UUID: ...

    @property
    def attempt(self) -> int: ...

    @property
    def claim_seq(self) -> int: ...

    @property
    def logger(self) -> JobLogger: ...

    def get_state(self, namespace: str) -> Any:
        """The job's state in ``namespace`` (decoded JSON) or None."""
        ...

    def set_state(self, namespace: str, value: Any) -> bool:
        """Write fenced state; False means this attempt was superseded and should stop."""
        ...

    def signal_payload(self, declared: Any = Any) -> Any:
        """The payload of the signal the job waited for, restored as ``declared``; None when
        it got none."""
        ...


@runtime_checkable
class JobBuilder(Protocol):
    """The fluent builder returned by ``JobScheduler.job(fn)``. Each option is validated when it
    is set (``InvalidJobError`` naming the option) and returns the builder; the target and its
    arguments are validated by ``enqueue()``. Single use, not thread safe."""

    def args(self, *args: Any) -> JobBuilder:
        """Positional arguments of the target (replaces earlier ones)."""
        ...

    def kwargs(self, **kwargs: Any) -> JobBuilder:
        """Keyword arguments of the target (merged with earlier ones)."""
        ...

    def priority(self, priority: JobPriority | int | str) -> JobBuilder:
        """An int from -100 to 100 (higher runs first), a ``JobPriority`` (named points of that
        range: LOW -50, NORMAL 0, HIGH 50, CRITICAL 100) or its name (``"high"``)."""
        ...

    def tags(self, *tags: str) -> JobBuilder:
        """Tags to find the job by (added to earlier ones)."""
        ...

    def max_retries(self, retries: int) -> JobBuilder:
        """Retries after the first attempt before the dead letter (0 = none)."""
        ...

    def backoff(self, policy: BackoffPolicy | float | timedelta | None) -> JobBuilder:
        """Delay between attempts: a ``BackoffPolicy`` or a fixed delay in seconds."""
        ...

    def idempotency_key(self, key: str) -> JobBuilder:
        """Enqueueing again with the same key returns the first job's id, not a second job."""
        ...

    def execution_target(self, label: str) -> JobBuilder:
        """Only workers serving this execution target claim the job."""
        ...

    def delay(self, delay: float | timedelta) -> JobBuilder:
        """Run no earlier than ``delay`` from now (replaces ``at``)."""
        ...

    def at(self, when: datetime) -> JobBuilder:
        """Run no earlier than ``when`` (timezone-aware; replaces ``delay``)."""
        ...

    def resource(self, key: str, *, permits: int) -> JobBuilder:
        """At most ``permits`` jobs holding resource ``key`` run at once across the cluster."""
        ...

    def fairness_key(self, key: str) -> JobBuilder:
        """The group the job is claimed fairly within, e.g. a tenant: claims interleave the
        keys of due jobs of equal priority, so one key's backlog does not delay the others
        (docs/scaling.md, "Fairness")."""
        ...

    def rate_limit(self, key: str, limit: int, *, per: timedelta | float) -> JobBuilder:
        """At most ``limit`` jobs with rate-limit ``key`` start per ``per`` across the
        cluster."""
        ...

    def transaction(self, transaction: object | None) -> JobBuilder:
        """Write the job inside the caller's open transaction (see ``JobScheduler``)."""
        ...

    def then(self, fn: Any, /, *args: Any, **kwargs: Any) -> JobBuilder:
        """A workflow step after the current step (docs/workflows.md); it becomes current."""
        ...

    def on_success(self, fn: Any, /, *args: Any, **kwargs: Any) -> JobBuilder:
        """A callback job run when the current step succeeded."""
        ...

    def on_failure(self, fn: Any, /, *args: Any, **kwargs: Any) -> JobBuilder:
        """A callback job run when the current step went to the dead letter."""
        ...

    def branch(
        self, condition: Condition, *, if_true: Any = None, if_false: Any = None
    ) -> JobBuilder:
        """After the current step succeeded, run the side the condition picks; ends the chain."""
        ...

    def await_signal(
        self,
        key: str,
        *,
        timeout: float | timedelta | None = None,
        on_timeout: SignalTimeout | str = SignalTimeout.FAIL,
    ) -> JobBuilder:
        """The current step waits for a signal (docs/signals.md)."""
        ...

    def property(self, name: str, value: str) -> JobBuilder:
        """A write-once, plaintext job property (stored through ``JobExtensionStore``)."""
        ...

    def encrypted(self) -> JobBuilder:
        """Encrypt this job's arguments, result, stored errors and state at rest.
        ``InvalidJobError`` when encryption is not configured."""
        ...

    def enqueue(self) -> UUID:
        """Validate and store the job; its id (the first job's id for a reused idempotency
        key). A second call raises ``InvalidJobError``."""
        ...


@runtime_checkable
class JobScheduler(Protocol):
    """Enqueue, schedule and manage jobs. Thread safe.

    ``transaction`` (where accepted) is the caller's open transaction handle (a SQLAlchemy
    ``Connection`` or ``Session``, a pymongo ``ClientSession``): the job is written in it, so a
    rollback leaves no job, and wake-ups happen only after commit. Invalid targets or arguments
    raise ``InvalidJobError``/``ClassNotAllowedError`` here, never at run time.
    """

    def job(self, fn: Callable[..., Any], /) -> JobBuilder:
        """A fluent builder for a job running ``fn``, for options beyond ``enqueue``'s."""
        ...

    def enqueue(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> UUID:
        """Run ``fn(*args, **kwargs)`` as soon as a worker is free; the job id."""
        ...

    def enqueue_in(
        self, transaction: object, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> UUID:
        """``enqueue`` inside the caller's open ``transaction``: a rollback removes the job."""
        ...

    def schedule(
        self,
        at_or_delay: datetime | timedelta | float,
        fn: Callable[..., Any],
        /,
        *args: Any,
        **kwargs: Any,
    ) -> UUID: ...

    def enqueue_invocation(
        self, invocation: JobInvocation, *, transaction: object | None = None
    ) -> UUID: ...

    def enqueue_many(
        self,
        fn: Callable[..., Any],
        arg_tuples: Sequence[Sequence[Any]],
        *,
        transaction: object | None = None,
    ) -> list[UUID]: ...

    def get(self, job_id: UUID) -> JobEntity | None: ...

    def result(self, job_id: UUID) -> JobResult: ...

    def detail(self, job_id: UUID) -> JobDetail | None:
        """The readable view of a job: decrypted, with sensitive fields masked when payload
        masking is on; None for an unknown id."""
        ...

    def search(self, query: JobQuery) -> list[JobEntity]: ...

    def cancel(self, job_id: UUID) -> bool: ...

    def retry(self, job_id: UUID) -> bool: ...

    def pause(self, job_id: UUID) -> bool: ...

    def resume(self, job_id: UUID) -> bool: ...

    def signal(self, target: UUID | str, payload: Any = None) -> SignalDecision:
        """Deliver ``payload`` to the job ``target`` (id) or to the jobs waiting for the signal
        key ``target``; exactly one of racing deliveries (and the timeout) wins."""
        ...


@runtime_checkable
class InvocationSubmissionService(Protocol):
    """Submission seam for trusted extensions that build ``JobInvocation``s themselves (block
    names, workflow definitions) instead of passing a callable. Every submission converges on
    the creation path of the public builders: the same validation (import, allowlist,
    signature, every argument restorable from its hint), idempotency, tags, properties,
    encryption, ``JobAuthorizationPolicy.check_create`` and wake-ups; the worker re-applies the
    dispatch checks and ``check_execute``. Trusted by convention, not a security barrier: an
    extension that accepts external input must validate and authorize it before building the
    invocation. Thread safe.

    Every prepared invocation (a job, a batch child or callback, a streaming batch child) is
    checked when it is enqueued, before anything is written: ``TargetNotImportableError`` (an
    ``InvalidJobError``) when its target cannot be imported, ``ClassNotAllowedError`` when the
    ``ClassPolicy`` refuses it, ``PayloadError`` when its arguments do not fit the target's
    signature or hints, ``JobAuthorizationError`` from ``check_create``."""

    def enqueue_invocation(self, invocation: JobInvocation) -> JobBuilder:
        """A builder for a job running ``invocation`` as soon as possible (the options of
        ``JobBuilder``; its ``args``/``kwargs`` are refused: the invocation carries them)."""
        ...

    def schedule_invocation(
        self, delay: timedelta | float, invocation: JobInvocation
    ) -> JobBuilder:
        """``enqueue_invocation`` with a delay (seconds or a timedelta) already set."""
        ...

    def enqueue_invocation_batch(self, name: str) -> Any:
        """A batch builder (the one of ``scheduler.batch(name)``): ``add(invocation)`` and
        ``add_invocations(invocations)`` add children, ``on_success``/``on_failure``/
        ``on_complete(invocation)`` callbacks, the batch options apply to every child, and
        ``enqueue()`` checks every invocation, then writes the batch in one unit of work and
        returns its id. The callbacks run once every child finished (docs/batches.md)."""
        ...

    def invocation_streaming_batch(self, name: str) -> Any:
        """A streaming batch builder: ``.items(items, factory)`` where ``factory(item)``
        returns the ``JobInvocation`` of that item's child; ``enqueue()`` writes the children
        chunk by chunk (resumable by ``name``, as ``scheduler.streaming_batch``). A child that
        fails its checks fails its chunk (``BatchChunkError``)."""
        ...

    def invocation_condition(self, invocation: JobInvocation) -> Condition:
        """The CUSTOM workflow condition for ``.branch(condition, ...)``: ``invocation``'s
        target (a module-level function or static method allowed by the ``ClassPolicy``) is
        called with its stored arguments and then the parent's ``JobResult`` and must return a
        bool. Checked now (``InvalidJobError`` naming the target)."""
        ...


__all__ = ["InvocationSubmissionService", "JobBuilder", "JobContext", "JobScheduler"]
