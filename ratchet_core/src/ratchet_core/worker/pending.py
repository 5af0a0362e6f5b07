"""The outcomes waiting in the completer (``completion.py``): one success, or one write of any
other outcome kind, each with its claim sequence (the fence) and what the subscribers need."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import attrs

from ratchet_api.model import JobType
from ratchet_api.store.entities import Completion, ExecutionRecord
from ratchet_core.worker.outcome import DeferReason, OutcomeKind


@attrs.define(slots=True, eq=False)
class PendingCompletion:
    """One success waiting to be written, with what the worker needs afterwards."""

    completion: Completion
    record: ExecutionRecord | None
    token: Any = None
    job_type: JobType = JobType.STANDARD


@attrs.define(slots=True, eq=False)
class PendingWrite:
    """Any other outcome waiting to be written. ``kind`` defaults from ``run_at``: a retry due
    at ``run_at`` (fenced ``schedule_retry``) or, with ``run_at`` None, the dead letter (fenced
    ``mark_failed_terminal``)."""

    job_id: UUID
    claim_seq: int
    message: str | None
    run_at: datetime | None
    record: ExecutionRecord | None = None
    token: Any = None
    cause: BaseException | None = None
    """The attempt's exception (for the workflow driver's ``callback_failed`` metric)."""
    plain_message: str | None = None
    """``message`` before sealing (an encrypted job stores it encrypted): what a workflow's
    failure callback receives."""
    kind: OutcomeKind | None = None
    defer_reason: DeferReason | None = None
    started: bool = True
    """Whether the job started (its started mark is written when its outcome is given up)."""

    def __attrs_post_init__(self) -> None:
        if self.kind is None:
            self.kind = OutcomeKind.RETRY if self.run_at is not None else OutcomeKind.DEAD_LETTER

    @property
    def operation(self) -> str:
        """The store method that writes it (for metrics and logs)."""
        assert self.kind is not None  # set by __attrs_post_init__
        return _OPERATIONS[(self.kind, self.defer_reason)]


PendingFailure = PendingWrite
"""The name of :class:`PendingWrite` when it carried failures only."""

_OPERATIONS = {
    (OutcomeKind.RETRY, None): "schedule_retry",
    (OutcomeKind.INTERRUPTED_REQUEUE, None): "schedule_retry",
    (OutcomeKind.DEAD_LETTER, None): "mark_failed_terminal",
    (OutcomeKind.RELEASE, None): "release_claim",
    (OutcomeKind.DEFER, DeferReason.CIRCUIT): "release_claim",
    (OutcomeKind.DEFER, DeferReason.FLOW_CONTROL): "defer_claim",
    (OutcomeKind.SUPERSEDED, None): "none",
}


__all__ = ["PendingCompletion", "PendingFailure", "PendingWrite"]
