"""One claimed job on its way through the worker, and how its target is called."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from ratchet_api.model import JobInvocation
from ratchet_api.store.entities import JobEntity

QUEUED = 0
"""Claimed, waiting for a slot or a thread."""
RUNNING = 1
"""The target is being called."""
FINISHED = 2
"""The call returned or raised; the outcome is being (or was) written."""
RELEASED = 3
"""Given back unstarted (shutdown)."""


class ClaimedJob:
    """A job this worker claimed: its entity, decoded invocation and loaded target, its
    execution type (gate) and its state. Mutable; state changes happen under the worker's
    lock."""

    __slots__ = (
        "called",
        "claimed_mono",
        "entity",
        "gate",
        "holds_slot",
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
        self.gate = "sync"
        self.state = QUEUED
        self.started_at: datetime | None = None
        self.started_mono = 0.0
        self.called = False
        self.holds_slot = True

    @property
    def elapsed_ms(self) -> int:
        return int((time.perf_counter() - self.started_mono) * 1000)

    @property
    def is_async(self) -> bool:
        return bool(self.loaded is not None and self.loaded.is_async)


__all__ = [
    "FINISHED",
    "QUEUED",
    "RELEASED",
    "RUNNING",
    "ClaimedJob",
]
