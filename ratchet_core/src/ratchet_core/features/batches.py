"""Batches: many child jobs tracked as one unit, with completion callbacks.

``scheduler.batch(name)`` returns a :class:`BatchBuilder`::

    batch = scheduler.batch("nightly-import")
    batch.add_many(import_file, [(path,) for path in paths])
    batch.on_success(send_report, batch.id).on_failure(page_oncall, batch.id)
    batch_id = batch.enqueue()

What is written, in one unit of work (``BatchStore.insert_batch``; inside the caller's
transaction when one is given):

* the :class:`~ratchet_api.store.BatchEntity` (SEALED, ``total`` = number of children);
* a ``BATCH_PARENT`` job, WAITING (never claimed), whose payload lists the callback jobs;
* the callback jobs (``CALLBACK``), WAITING with the parent job as their parent;
* the children (``BATCH_CHILD``, ``batch_id`` set), PENDING.

The store counts each child in the batch's progress in the same unit of work as the child's
terminal write. Whoever writes a child's terminal outcome (the worker after a completion flush or
a dead letter, ``scheduler.cancel``) then calls :meth:`BatchTracker.try_complete`; a periodic
sweep (:meth:`BatchTracker.sweep`, run by every worker) completes batches whose last finisher
crashed in between. Completion is idempotent up to the store's single-winner CAS
``mark_batch_complete_if_ready``: the matching callbacks are released (WAITING -> PENDING, one
winner per callback job), the others cancelled, the parent job finished, and then the batch is
marked COMPLETED by exactly one caller.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Self
from uuid import UUID

import attrs

from ratchet_api.errors import InvalidJobError, PayloadError, UnsupportedCapabilityError
from ratchet_api.ids import uuid7
from ratchet_api.model import JobInvocation, JobPriority, JobStatus, JobType
from ratchet_api.store.entities import MAX_KEY_LENGTH, BatchEntity, BatchStatus, JobEntity
from ratchet_api.store.protocols import BatchStore, JobStore
from ratchet_core.enqueue.options import JobOptions, JobOptionSetters
from ratchet_core.enqueue.submitter import Submitter, refuse_parent_placeholders

_log = logging.getLogger("ratchet.batches")

BATCH_TARGET = "ratchet:batch"
"""``target`` of a batch's parent job (it is never run)."""

ON_SUCCESS = "on_success"
ON_FAILURE = "on_failure"
ON_COMPLETE = "on_complete"
_KINDS = (ON_SUCCESS, ON_FAILURE, ON_COMPLETE)

RECOUNT_BELOW = 10
"""The sweep recounts a SEALED batch from its children when at most this many are pending..."""
RECOUNT_QUIET = 30.0
"""...and its counts have not moved for this many seconds (a recount racing a count still in
flight would count that child twice on a store that counts outside the child's write)."""


def require_batch_store(store: JobStore, feature: str) -> BatchStore:
    """The store as ``BatchStore`` or ``UnsupportedCapabilityError`` naming ``feature``."""
    batches = store.capability(BatchStore)
    if batches is None:
        raise UnsupportedCapabilityError("BatchStore", feature)
    return batches


def check_batch_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise InvalidJobError(f"batch name must be a non-empty string, got {name!r}")
    if len(name) > MAX_KEY_LENGTH:
        raise InvalidJobError(
            f"batch name is {len(name)} characters, the limit is {MAX_KEY_LENGTH}"
        )
    return name


def parent_job(batch_id: UUID, callbacks: dict[str, list[UUID]], now: datetime) -> JobEntity:
    """The WAITING parent job of a batch; its payload records the callback jobs by kind."""
    payload: dict[str, Any] = {"batch_id": str(batch_id)}
    payload.update({kind: [str(i) for i in ids] for kind, ids in callbacks.items()})
    return JobEntity(
        id=uuid7(),
        status=JobStatus.WAITING,
        job_type=JobType.BATCH_PARENT,
        target=BATCH_TARGET,
        payload=json.dumps(payload, sort_keys=True),
        scheduled_at=now,
        created_at=now,
        updated_at=now,
        max_retries=0,
    )


ChildTarget = Callable[..., Any] | JobInvocation
"""What a batch child or callback runs: a function (with its arguments) or a prepared
``JobInvocation`` (the ``InvocationSubmissionService`` path; it carries its arguments)."""

Callback = tuple[str, ChildTarget, tuple[Any, ...], dict[str, Any]]


def refuse_arguments(what: str, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    """``InvalidJobError`` when arguments come with a prepared ``JobInvocation``."""
    if args or kwargs:
        raise InvalidJobError(
            f"{what}: the arguments of a prepared JobInvocation cannot be changed (it carries "
            "its own)"
        )


def check_child_invocation(submitter: Submitter, invocation: Any) -> JobInvocation:
    """A prepared child or callback invocation after the checks ``enqueue_invocation``
    applies (a ``JobInvocation``; importable, allowed by the class policy, arguments matching
    the signature, every argument restorable from its hint)."""
    return submitter.check_invocation(invocation)


def _named(what: str, exc: InvalidJobError | PayloadError) -> InvalidJobError | PayloadError:
    """``exc`` (same type) with ``what`` in front of its message."""
    named = type(exc)(f"{what}: {exc}")
    named.__cause__ = exc
    return named


def callback_jobs(
    submitter: Submitter,
    callbacks: Sequence[Callback],
    options: JobOptions,
    now: datetime,
    name: str = "",
) -> tuple[dict[str, list[UUID]], list[JobEntity]]:
    """The WAITING callback jobs of a batch (without their parent yet) and their ids by
    kind. ``InvalidJobError`` names the batch and the callback."""
    by_kind: dict[str, list[UUID]] = {kind: [] for kind in _KINDS}
    jobs: list[JobEntity] = []
    callback_options = JobOptions(priority=options.priority, encrypted=options.encrypted)
    for kind, fn, args, kwargs in callbacks:
        try:
            if isinstance(fn, JobInvocation):
                invocation = check_child_invocation(submitter, fn)
            else:
                invocation = submitter.resolve(fn, args, kwargs)
        except (InvalidJobError, PayloadError) as exc:
            raise _named(f"batch {name!r} {kind} callback", exc) from exc
        job = submitter.entity(
            invocation,
            callback_options,
            now,
            status=JobStatus.WAITING,
            job_type=JobType.CALLBACK,
        )
        by_kind[kind].append(job.id)
        jobs.append(job)
    return by_kind, jobs


@attrs.define
class _Children:
    target: Callable[..., Any]
    arg_tuples: list[Sequence[Any]]
    kwargs: dict[str, Any] | None = None


class BatchBuilder(JobOptionSetters):
    """Collects a batch's children and callbacks; ``enqueue()`` writes them all at once.

    ``id`` is the batch id, known before ``enqueue`` so that callbacks can take it as an
    argument. Children and callbacks are functions with their arguments or prepared
    ``JobInvocation`` objects (the ``InvocationSubmissionService`` path). Options
    (``priority``, ``tags``, ``max_retries``, ``resource``, ``rate_limit``, ``transaction``:
    the job builder's setters and checks) apply to every child. Every target and argument is
    validated by ``enqueue()`` before anything is written (``InvalidJobError`` naming the
    batch and the child or callback; a prepared invocation gets the checks of
    ``enqueue_invocation``). Single use, not thread safe.
    """

    def __init__(self, submitter: Submitter, name: str) -> None:
        self._submitter = submitter
        self.name = check_batch_name(name)
        self.id: UUID = uuid7()
        self._children: list[_Children | JobInvocation] = []
        self._callbacks: list[Callback] = []
        self._options = JobOptions()
        self._used = False

    def add(self, fn: ChildTarget, /, *args: Any, **kwargs: Any) -> Self:
        """One child running ``fn(*args, **kwargs)``, or the prepared ``JobInvocation``
        ``fn`` (no further arguments)."""
        if isinstance(fn, JobInvocation):
            refuse_arguments(f"batch {self.name!r}", args, kwargs)
            self._children.append(fn)
        else:
            self._children.append(_Children(fn, [args], dict(kwargs)))
        return self

    def add_many(self, fn: Callable[..., Any], arg_tuples: Iterable[Sequence[Any]]) -> Self:
        """One child per argument tuple (the ``enqueue_many`` form)."""
        if isinstance(arg_tuples, (str, bytes)):
            raise InvalidJobError("add_many expects an iterable of argument tuples")
        items: list[Sequence[Any]] = []
        for index, args in enumerate(arg_tuples):
            if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
                raise InvalidJobError(
                    f"batch {self.name!r}: item {index} must be a tuple of arguments, got {args!r}"
                )
            items.append(args)
        self._children.append(_Children(fn, items))
        return self

    def add_invocations(self, invocations: Iterable[JobInvocation]) -> Self:
        """One child per prepared ``JobInvocation``."""
        if isinstance(invocations, (str, bytes, JobInvocation)) or not isinstance(
            invocations, Iterable
        ):
            raise InvalidJobError("add_invocations expects an iterable of JobInvocation objects")
        items = list(invocations)
        for index, invocation in enumerate(items):
            if not isinstance(invocation, JobInvocation):
                raise InvalidJobError(
                    f"batch {self.name!r}: item {index} must be a JobInvocation, got "
                    f"{type(invocation).__name__}"
                )
        self._children.extend(items)
        return self

    def _callback(self, kind: str, fn: ChildTarget, args: tuple[Any, ...], kwargs: Any) -> Self:
        if isinstance(fn, JobInvocation):
            refuse_arguments(f"batch {self.name!r} {kind} callback", args, kwargs)
        self._callbacks.append((kind, fn, args, dict(kwargs)))
        return self

    def on_success(self, fn: ChildTarget, /, *args: Any, **kwargs: Any) -> Self:
        """Run ``fn(*args, **kwargs)`` (or the prepared invocation ``fn``) once every child
        finished and none failed."""
        return self._callback(ON_SUCCESS, fn, args, kwargs)

    def on_failure(self, fn: ChildTarget, /, *args: Any, **kwargs: Any) -> Self:
        """Run ``fn(*args, **kwargs)`` (or the prepared invocation ``fn``) once every child
        finished and at least one failed (dead letter or cancelled)."""
        return self._callback(ON_FAILURE, fn, args, kwargs)

    def on_complete(self, fn: ChildTarget, /, *args: Any, **kwargs: Any) -> Self:
        """Run ``fn(*args, **kwargs)`` (or the prepared invocation ``fn``) once every child
        finished, whatever the outcome."""
        return self._callback(ON_COMPLETE, fn, args, kwargs)

    def enqueue(self) -> UUID:
        """Validate every child and callback, then write the batch with all its jobs in one
        unit of work. Returns the batch id. A batch without children completes at once (its
        callbacks are released)."""
        if self._used:
            raise InvalidJobError("this batch builder was already enqueued; start a new one")
        self._used = True
        submitter = self._submitter
        options = self._options
        now = datetime.now(UTC)
        groups = [self._resolve(group) for group in self._children]
        target = next((g[0].target for g in groups if g), "ratchet:batch")
        with submitter.enqueue_span(target, sum(len(g) for g in groups)):
            children: list[JobEntity] = []
            for invocations in groups:
                # one group's children differ only in id and payload: copies of its first
                children.extend(
                    submitter.entities(
                        invocations, options, now, job_type=JobType.BATCH_CHILD, batch_id=self.id
                    )
                )
            callbacks, waiting = callback_jobs(submitter, self._callbacks, options, now, self.name)
            parent = parent_job(self.id, callbacks, now)
            waiting = [attrs.evolve(j, parent_id=parent.id) for j in waiting]
            batch = BatchEntity(
                id=self.id,
                name=self.name,
                status=BatchStatus.SEALED,
                total=len(children),
                parent_job_id=parent.id,
                created_at=now,
            )
            store = submitter.store_for(options.transaction)
            batches = require_batch_store(store, "scheduler.batch")
            batches.insert_batch(batch, [parent, *waiting, *children])
        _log.info("batch %s (%s) enqueued with %d children", self.id, self.name, len(children))
        if children:
            submitter.after_write(options, children[0])
        else:
            self._complete_empty(options)
        return self.id

    def _resolve(self, group: _Children | JobInvocation) -> list[JobInvocation]:
        """The group's validated invocations. A child has no parent: one asking for a
        parent's outcome is refused, as ``scheduler.enqueue`` refuses it."""
        submitter = self._submitter
        try:
            if isinstance(group, JobInvocation):
                invocations = [check_child_invocation(submitter, group)]
            elif group.kwargs is not None:
                args = group.arg_tuples[0]
                invocations = [submitter.resolve(group.target, args, group.kwargs)]
            else:
                invocations = submitter.resolve_many(group.target, group.arg_tuples)
            if invocations:
                refuse_parent_placeholders(invocations[0])  # one target per group
        except (InvalidJobError, PayloadError) as exc:
            raise _named(f"batch {self.name!r}", exc) from exc
        return invocations

    def _complete_empty(self, options: JobOptions) -> None:
        submitter = self._submitter
        tracker = BatchTracker(submitter.store)
        batch_id = self.id

        def complete() -> None:
            if tracker.try_complete(batch_id):
                submitter.wake(JobPriority.NORMAL, None)

        # without a registered hook (REGISTRATION_FAILED) the workers' sweep completes it
        submitter.after_commit(complete, options.transaction)


class BatchTracker:
    """Completes batches whose children have all finished (see the module docstring).
    Thread safe; every method swallows and logs store errors (the sweep retries)."""

    def __init__(self, store: JobStore, *, on_released: Callable[[], None] | None = None) -> None:
        self._store = store
        self._batches = store.capability(BatchStore)
        self._on_released = on_released
        self._lock = threading.Lock()
        self._last_sweep = 0.0
        self._seen: dict[UUID, tuple[int, int, float]] = {}

    @property
    def enabled(self) -> bool:
        return self._batches is not None

    def children_finished(self, jobs: Iterable[JobEntity]) -> None:
        """Call after the terminal writes of ``jobs`` applied; completes their batches if
        those children were the last ones."""
        if self._batches is None:
            return
        for batch_id in {j.batch_id for j in jobs if j.batch_id is not None}:
            self.try_complete(batch_id)

    def try_complete(self, batch_id: UUID) -> bool:
        """Complete the batch if it is SEALED and every child finished: release its callbacks
        and win (or lose) the store's completion CAS. True for the one caller that marked it
        COMPLETED."""
        batches = self._batches
        if batches is None:
            return False
        try:
            batch = batches.find_batch(batch_id)
            if batch is None or batch.status is not BatchStatus.SEALED or batch.pending > 0:
                return False
            released = self._release_callbacks(batch)
            if not batches.mark_batch_complete_if_ready(batch_id):
                return False
        except Exception:  # noqa: BLE001 - the sweep completes it later
            _log.warning("completing batch %s failed; the sweep retries", batch_id, exc_info=True)
            return False
        _log.info(
            "batch %s (%s) completed: %d succeeded, %d failed",
            batch.id,
            batch.name,
            batch.succeeded,
            batch.failed,
        )
        if released and self._on_released is not None:
            self._on_released()
        return True

    def _release_callbacks(self, batch: BatchEntity) -> int:
        """Idempotent: the matching callbacks WAITING -> PENDING, the others cancelled, the
        parent job finished. Returns how many callbacks this call released."""
        if batch.parent_job_id is None:
            return 0
        parent = self._store.find_by_id(batch.parent_job_id)
        if parent is None:
            return 0
        try:
            listed = json.loads(parent.payload)
        except ValueError:
            listed = {}
        succeeded = batch.failed == 0
        wanted = {ON_COMPLETE, ON_SUCCESS if succeeded else ON_FAILURE}
        release: list[UUID] = []
        for kind in _KINDS:
            ids = [UUID(i) for i in listed.get(kind, [])]
            if kind in wanted:
                release.extend(ids)
            else:
                for job_id in ids:
                    self._store.cancel_job(job_id)
        released = self._store.release_waiting_children(parent.id, release) if release else 0
        if parent.status is JobStatus.WAITING:
            final = JobStatus.SUCCEEDED if succeeded else JobStatus.FAILED
            self._store.compare_and_swap_status(parent.id, JobStatus.WAITING, final)
        return released

    def sweep(self, limit: int = 100) -> int:
        """Complete SEALED batches whose children have all finished (their last finisher
        crashed before completing them); batches with only a few children left are recounted
        first (``recount_batch``: a store that counts outside the child's unit of work may
        have lost a count). Returns how many this call completed."""
        batches = self._batches
        if batches is None:
            return 0
        completed = 0
        try:
            sealed = batches.find_batches(statuses=frozenset({BatchStatus.SEALED}), limit=limit)
            for found in sealed:
                batch = found
                if 0 < batch.pending <= RECOUNT_BELOW and self._quiet(batch):
                    batch = batches.recount_batch(batch.id) or batch
                if batch.pending == 0 and self.try_complete(batch.id):
                    completed += 1
        except Exception:  # noqa: BLE001 - retried next sweep
            _log.warning("the batch sweep failed; retried next time", exc_info=True)
        return completed

    def _quiet(self, batch: BatchEntity) -> bool:
        """True once the batch's counts have not moved for ``RECOUNT_QUIET`` seconds."""
        now = time.monotonic()
        counts = (batch.succeeded, batch.failed)
        with self._lock:
            seen = self._seen.get(batch.id)
            if seen is None or seen[:2] != counts:
                if len(self._seen) > 10_000:
                    self._seen.clear()
                self._seen[batch.id] = (*counts, now)
                return False
            return now - seen[2] >= RECOUNT_QUIET

    def sweep_every(self, interval: float) -> int:
        """``sweep`` at most once per ``interval`` seconds across threads; 0 when skipped."""
        with self._lock:
            now = time.monotonic()
            if now - self._last_sweep < interval:
                return 0
            self._last_sweep = now
        return self.sweep()


__all__ = [
    "BATCH_TARGET",
    "Callback",
    "ChildTarget",
    "callback_jobs",
    "check_child_invocation",
    "BatchBuilder",
    "BatchTracker",
    "check_batch_name",
    "parent_job",
    "require_batch_store",
]
