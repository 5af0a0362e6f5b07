"""One claimed job on its way through the worker, and the key of its concurrency gate."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import attrs

from ratchet_api.model import ExecutionKind, JobInvocation
from ratchet_api.store.entities import JobEntity

QUEUED = 0
"""Claimed, waiting for a slot or a thread."""
RUNNING = 1
"""Admitted or being admitted: the target is (about to be) called."""
FINISHED = 2
"""Its outcome was handed to the completer and is being (or was) written."""
RELEASED = 3
"""Given back unstarted (shutdown); the release is being written."""
GONE = 4
"""Its outcome was written (or given up on): out of the table for good."""


@attrs.frozen
class GateKey:
    """The concurrency gate of a job: its execution kind (``def`` or ``async def``), or the
    execution target label it names. Two fields, so a user label ``"sync"`` never shares the
    gate of the ``def`` jobs."""

    kind: ExecutionKind | None = None
    label: str | None = None

    @property
    def tuning_name(self) -> str:
        """The name ``ExecutionTuningProvider.max_concurrency`` knows the gate by."""
        if self.label is not None:
            return self.label
        return "async" if self.kind is ExecutionKind.ASYNC else "sync"

    @classmethod
    def of_kind(cls, kind: ExecutionKind) -> GateKey:
        return cls(kind=kind)

    @classmethod
    def of_label(cls, label: str) -> GateKey:
        return cls(label=label)


SYNC_GATE = GateKey.of_kind(ExecutionKind.SYNC)
ASYNC_GATE = GateKey.of_kind(ExecutionKind.ASYNC)


class ClaimedJob:
    """A job this worker claimed: its entity, decoded invocation and loaded target, its gate
    and its state. Mutable; ``state`` changes only inside ``ClaimedJobs`` (under its lock)."""

    __slots__ = (
        "called",
        "claimed_mono",
        "entity",
        "gate",
        "invocation",
        "loaded",
        "started_at",
        "started_mono",
        "state",
    )

    def __init__(self, entity: JobEntity, claimed_mono: float | None = None) -> None:
        self.entity = entity
        self.claimed_mono = time.monotonic() if claimed_mono is None else claimed_mono
        """``time.monotonic()`` just before the claim was sent (the claim stamped the job's
        heartbeat after it)."""
        self.invocation: JobInvocation | None = None
        self.loaded: Any = None
        self.gate = SYNC_GATE
        self.state = QUEUED
        self.started_at: datetime | None = None
        self.started_mono = 0.0
        self.called = False

    @property
    def elapsed_ms(self) -> int:
        if not self.started_mono:
            return 0
        return int((time.perf_counter() - self.started_mono) * 1000)

    @property
    def is_async(self) -> bool:
        return bool(self.loaded is not None and self.loaded.is_async)


__all__ = [
    "ASYNC_GATE",
    "FINISHED",
    "GONE",
    "QUEUED",
    "RELEASED",
    "RUNNING",
    "SYNC_GATE",
    "ClaimedJob",
    "GateKey",
]
