"""Streaming batches: a large or unbounded iterable expanded into child jobs chunk by chunk.

::

    batch_id = (
        scheduler.streaming_batch("reindex", read_ids(), lambda doc_id: (reindex, doc_id))
        .chunk_size(1000)
        .on_complete(report, "reindex")
        .enqueue()
    )

``factory(item)`` returns the child: a ``(fn, *args)`` tuple or a ``JobInvocation``. Only one
chunk of items and jobs is held in memory at a time. Each chunk is written on its own
(``BatchStore.add_batch_jobs``: the children and the batch's new total in one unit of work);
each child's idempotency key is ``ratchet:batch:<batch id>:<item index>``. The batch id is
derived from the name, so calling ``streaming_batch`` again with the same name (after a crash,
or after a :class:`~ratchet_api.errors.BatchChunkError`) finds the batch, skips the items its
committed chunks already hold (without calling ``factory`` for them) and goes on; a chunk
written twice inserts nothing the second time. After the last item the batch is sealed: it
completes (callbacks released) once every child has finished.

A chunk that fails records the reason on the batch (``last_error``), calls every
``on_chunk_failure`` listener with a :class:`BatchChunkFailure`, and raises
``BatchChunkError``.
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, Self
from uuid import UUID

import attrs

from ratchet_api.errors import BatchChunkError, InvalidJobError, RatchetError, StoreError
from ratchet_api.model import JobInvocation, JobType
from ratchet_api.store.entities import BatchEntity, BatchStatus, JobEntity
from ratchet_api.store.protocols import BatchStore
from ratchet_core.enqueue.submitter import Submitter, refuse_parent_placeholders
from ratchet_core.features.batches import (
    BatchBuilder,
    BatchTracker,
    callback_jobs,
    check_child_invocation,
    parent_job,
    require_batch_store,
)

_log = logging.getLogger("ratchet.batches")

_NAMESPACE = uuid.UUID("5f0c3e52-7a4e-4c1b-9d56-2b8f3c1e9a47")
DEFAULT_CHUNK_SIZE = 1000
CHUNK_TRIES = 4
"""Writes of one chunk before a transient store error fails it."""
MAX_CHUNK_SIZE = 50_000


def streaming_batch_id(name: str) -> UUID:
    """The id of the streaming batch called ``name`` (stable across processes and runs)."""
    return uuid.uuid5(_NAMESPACE, f"ratchet-streaming-batch:{name}")


@attrs.frozen(kw_only=True)
class BatchChunkFailure:
    """The event a failed chunk emits (to ``on_chunk_failure`` listeners)."""

    batch_id: UUID
    name: str
    chunk: int
    first_item: int
    error: BaseException


class StreamingBatchBuilder(BatchBuilder):
    """``BatchBuilder`` options and callbacks, children from ``items`` through ``factory``.
    ``add``/``add_many`` are not available (the items are the children)."""

    _items: Iterable[Any]
    _factory: Callable[[Any], Any]

    def __init__(
        self,
        submitter: Submitter,
        name: str,
        items: Iterable[Any],
        factory: Callable[[Any], Any],
    ) -> None:
        super().__init__(submitter, name)
        self.id = streaming_batch_id(self.name)
        self._set_source(items, factory)
        self._chunk_size = DEFAULT_CHUNK_SIZE
        self._listeners: list[Callable[[BatchChunkFailure], None]] = []

    def _set_source(self, items: Iterable[Any], factory: Callable[[Any], Any]) -> None:
        if not callable(factory):
            raise InvalidJobError(f"streaming batch {self.name!r}: factory must be callable")
        if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
            raise InvalidJobError(f"streaming batch {self.name!r}: items must be an iterable")
        self._items = items
        self._factory = factory

    def add(self, fn: Any, /, *args: Any, **kwargs: Any) -> Self:
        raise InvalidJobError("a streaming batch takes its children from its items")

    def add_many(self, fn: Callable[..., Any], arg_tuples: Iterable[Any]) -> Self:
        raise InvalidJobError("a streaming batch takes its children from its items")

    def add_invocations(self, invocations: Iterable[JobInvocation]) -> Self:
        raise InvalidJobError("a streaming batch takes its children from its items")

    def chunk_size(self, size: int) -> Self:
        """Items per chunk (default 1000): memory holds one chunk, each chunk one commit."""
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_CHUNK_SIZE:
            raise InvalidJobError(
                f"streaming batch chunk_size must be between 1 and {MAX_CHUNK_SIZE}, got {size!r}"
            )
        self._chunk_size = size
        return self

    def on_chunk_failure(self, listener: Callable[[BatchChunkFailure], None]) -> Self:
        """Call ``listener`` (in the enqueuing thread) when a chunk fails, before
        ``BatchChunkError`` is raised."""
        self._listeners.append(listener)
        return self

    def transaction(self, transaction: object | None) -> Self:
        raise InvalidJobError(
            "a streaming batch commits chunk by chunk; it cannot join one transaction"
        )

    def enqueue(self) -> UUID:
        """Write every remaining chunk, seal the batch and return its id. Raises
        ``BatchChunkError`` for a failed chunk (committed chunks stay)."""
        if self._used:
            raise InvalidJobError("this batch builder was already enqueued; start a new one")
        self._used = True
        submitter = self._submitter
        batches = require_batch_store(submitter.store, "scheduler.streaming_batch")
        batch = self._open()
        if batch.status is not BatchStatus.OPEN:
            return self.id  # finished in an earlier run
        start = batch.total
        if start:
            _log.info("streaming batch %s (%s) resumes after %d items", self.id, self.name, start)
        items = itertools.islice(iter(self._items), start, None)
        index, chunk_no = start, start // self._chunk_size
        while True:
            chunk = list(itertools.islice(items, self._chunk_size))
            if not chunk:
                break
            try:
                jobs = self._chunk_jobs(chunk, index)
                self._write_chunk(batches, jobs)
            except Exception as exc:  # noqa: BLE001 - reported as BatchChunkError
                self._chunk_failed(chunk_no, index, exc)
            if index == start:
                submitter.wake(self._options.priority, None)
            index += len(chunk)
            chunk_no += 1
        batches.seal_batch(self.id)
        _log.info("streaming batch %s (%s) sealed with %d children", self.id, self.name, index)
        submitter.wake(self._options.priority, None)
        BatchTracker(submitter.store).try_complete(self.id)  # every child may be done already
        return self.id

    def _write_chunk(self, batches: BatchStore, jobs: list[JobEntity]) -> None:
        """``add_batch_jobs``, retried on a transient store error (a chunk written twice
        inserts nothing the second time)."""
        for attempt in range(CHUNK_TRIES):
            try:
                batches.add_batch_jobs(self.id, jobs)
                return
            except StoreError as exc:
                if not exc.retryable or attempt == CHUNK_TRIES - 1:
                    raise
                _log.warning("streaming batch %s: chunk write failed (%s); retrying", self.id, exc)
                time.sleep(0.2 * 2**attempt)

    def _open(self) -> BatchEntity:
        batches = require_batch_store(self._submitter.store, "scheduler.streaming_batch")
        found = batches.find_batch(self.id)
        if found is not None:
            return found
        now = datetime.now(UTC)
        callbacks, jobs = callback_jobs(self._submitter, self._callbacks, self._options, now)
        parent = parent_job(self.id, callbacks, now)
        jobs = [attrs.evolve(j, parent_id=parent.id) for j in jobs]
        batch = BatchEntity(
            id=self.id, name=self.name, status=BatchStatus.OPEN, parent_job_id=parent.id
        )
        try:
            batches.insert_batch(batch, [parent, *jobs])
        except RatchetError:
            found = batches.find_batch(self.id)  # created concurrently by another process
            if found is None:
                raise
            return found
        return batch

    def _chunk_jobs(self, chunk: list[Any], first: int) -> list[JobEntity]:
        submitter = self._submitter
        now = datetime.now(UTC)
        invocations = self._invocations(chunk, first)
        with submitter.enqueue_span(invocations[0].target, len(invocations)):
            return [
                submitter.entity(
                    invocation,
                    self._options,
                    now,
                    job_type=JobType.BATCH_CHILD,
                    batch_id=self.id,
                    idempotency_key=f"ratchet:batch:{self.id}:{first + n}",
                )
                for n, invocation in enumerate(invocations)
            ]

    def _invocations(self, chunk: list[Any], first: int) -> list[JobInvocation]:
        """The chunk's children, validated: a ``(fn, *args)`` through the resolver, a
        ``JobInvocation`` with the checks of ``enqueue_invocation``."""
        made = [self._factory(item) for item in chunk]
        for n, child in enumerate(made):
            self._check_made(child, first + n)
        submitter = self._submitter
        targets = {id(c[0]) for c in made if isinstance(c, tuple)}
        if len(targets) == 1 and all(isinstance(c, tuple) for c in made):
            # one target for the whole chunk (the usual case): vetted once
            out = submitter.resolve_many(made[0][0], [c[1:] for c in made])
            refuse_parent_placeholders(out[0])
            return out
        out = []
        for child in made:
            if isinstance(child, JobInvocation):
                invocation = check_child_invocation(submitter, child)
            else:
                invocation = submitter.resolve(child[0], child[1:], {})
            refuse_parent_placeholders(invocation)  # a child has no parent
            out.append(invocation)
        return out

    def _check_made(self, child: Any, index: int) -> None:
        """``InvalidJobError`` when ``factory`` returned something that is not a child."""
        if isinstance(child, JobInvocation):
            return
        if not isinstance(child, tuple) or not child or not callable(child[0]):
            raise InvalidJobError(
                f"factory returned {child!r} for item {index}; return (fn, *args) or "
                "a JobInvocation"
            )

    def _chunk_failed(self, chunk_no: int, first: int, exc: Exception) -> None:
        batches = require_batch_store(self._submitter.store, "scheduler.streaming_batch")
        message = f"chunk {chunk_no} (items from {first}): {type(exc).__name__}: {exc}"
        _log.error("streaming batch %s (%s): %s", self.id, self.name, message)
        try:
            batches.record_batch_error(self.id, message)
        except Exception:  # noqa: BLE001 - the raised error still says it
            _log.warning("recording the chunk failure of batch %s failed", self.id)
        event = BatchChunkFailure(
            batch_id=self.id, name=self.name, chunk=chunk_no, first_item=first, error=exc
        )
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:  # noqa: BLE001 - a listener never hides the chunk's failure
                _log.exception("on_chunk_failure listener %r failed", listener)
        raise BatchChunkError(self.id, chunk_no, first, str(exc)) from exc


class InvocationStreamingBatchBuilder(StreamingBatchBuilder):
    """The streaming batch of the ``InvocationSubmissionService``: ``factory(item)`` returns a
    prepared ``JobInvocation`` (checked as ``enqueue_invocation`` checks one). Set the items
    with :meth:`items` before ``enqueue()``; everything else (chunks, resume by name,
    callbacks, options) is the ``StreamingBatchBuilder``'s."""

    def __init__(self, submitter: Submitter, name: str) -> None:
        super().__init__(submitter, name, (), _no_factory)
        self._has_items = False

    def items(self, items: Iterable[Any], factory: Callable[[Any], JobInvocation]) -> Self:
        """The children: one per item of ``items``, ``factory(item)`` being its invocation."""
        self._set_source(items, factory)
        self._has_items = True
        return self

    def enqueue(self) -> UUID:
        if not self._has_items:
            raise InvalidJobError(
                f"streaming invocation batch {self.name!r}: call .items(items, factory) "
                "before enqueue()"
            )
        return super().enqueue()

    def _check_made(self, child: Any, index: int) -> None:
        if not isinstance(child, JobInvocation):
            raise InvalidJobError(
                f"factory returned {child!r} for item {index}; an invocation streaming batch "
                "takes a JobInvocation per item"
            )


def _no_factory(item: Any) -> Any:
    raise InvalidJobError("no items: call .items(items, factory)")


__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "BatchChunkFailure",
    "InvocationStreamingBatchBuilder",
    "StreamingBatchBuilder",
    "streaming_batch_id",
]
