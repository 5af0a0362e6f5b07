"""What follows a written outcome: the completer's subscribers of a worker.

In this order, for every outcome the completer wrote (or gave up on):

1. workflow settling: a success, or a dead letter (a refusal at dispatch included), of a job
   with dependents settles its children on the workflow driver's threads;
2. batch tracking: a success or a dead letter may complete its batch;
3. counters (``WorkerStats``) and the log line of a superseded claim;
4. the table of claimed jobs: the job leaves it (last, so ``run_until_idle`` never sees a gap
   with nothing claimed while a follow-up is still to be handed on).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ratchet_core.features.batches import BatchTracker
from ratchet_core.features.workflow.driver import WorkflowDriver
from ratchet_core.worker.completion import PendingCompletion, PendingWrite
from ratchet_core.worker.outcome import DeferReason, OutcomeKind
from ratchet_core.worker.stats import Counters
from ratchet_core.worker.table import ClaimedJobs

_log = logging.getLogger("ratchet.worker")

_COUNTER = {
    OutcomeKind.RETRY: "retried",
    OutcomeKind.INTERRUPTED_REQUEUE: "retried",
    OutcomeKind.DEAD_LETTER: "failed",
    OutcomeKind.RELEASE: "released",
    OutcomeKind.DEFER: "deferred",
}


class WorkerSubscriber:
    """The worker's ``OutcomeSubscriber`` (see the module docstring). ``workflow()`` is read
    at each call (the driver is made at start)."""

    def __init__(
        self,
        *,
        table: ClaimedJobs,
        counters: Counters,
        batches: BatchTracker,
        workflow: Callable[[], WorkflowDriver | None],
        node_id: str,
        on_deferred: Callable[[PendingWrite], None] | None = None,
    ) -> None:
        self._on_deferred = on_deferred
        self._table = table
        self._counters = counters
        self._batches = batches
        self._workflow = workflow
        self._node_id = node_id

    def succeeded(
        self, batch: Sequence[PendingCompletion], applied: Sequence[PendingCompletion]
    ) -> None:
        workflow = self._workflow()
        if workflow is not None and applied:
            self._hand_on(
                "workflow",
                lambda: workflow.succeeded(
                    (i.token.entity, i.completion.result) for i in applied if i.token
                ),
            )
        if applied:
            self._hand_on(
                "batch",
                lambda: self._batches.children_finished(i.token.entity for i in applied if i.token),
            )
        self._counters.add("succeeded", len(applied))
        written = {id(item) for item in applied}
        stale = [i.completion.job_id for i in batch if id(i) not in written]
        if stale:
            self._counters.add("stale", len(stale))
            _log.warning(
                "completions of %d jobs were not written because their claim was superseded "
                "(cancelled or recovered by another node while running): %s",
                len(stale),
                ", ".join(str(s) for s in stale[:10]),
            )
        for item in batch:
            if item.token is not None:
                self._table.written(item.token)

    def wrote(self, item: PendingWrite, applied: bool | None) -> None:
        job = item.token
        kind = item.kind
        if applied and job is not None:
            dead = kind is OutcomeKind.DEAD_LETTER
            workflow = self._workflow()
            if workflow is not None and kind in (OutcomeKind.RETRY, OutcomeKind.DEAD_LETTER):
                text = item.plain_message if item.plain_message is not None else item.message
                cause = item.cause if item.cause is not None else RuntimeError(text)
                self._hand_on(
                    "workflow",
                    lambda: workflow.failed(job.entity, cause, text or "", dead_lettered=dead),
                )
            if dead:  # its batch may be complete now
                self._hand_on("batch", lambda: self._batches.children_finished([job.entity]))
        if applied and kind in _COUNTER:
            assert kind is not None
            flow = item.defer_reason is DeferReason.FLOW_CONTROL
            # a job refused by flow control counts as released (WorkerStats), as before
            self._counters.add("released" if flow else _COUNTER[kind])
            if kind is OutcomeKind.DEFER and self._on_deferred is not None:
                self._on_deferred(item)
        elif applied is False and kind is not OutcomeKind.SUPERSEDED:
            # (a claim found superseded before the job started is logged by the admission)
            self._counters.add("stale")
            _log.warning(
                "job %s: %s of claim %d not written, its claim was superseded "
                "(cancelled or recovered elsewhere)",
                item.job_id,
                item.operation,
                item.claim_seq,
            )
        if job is not None:
            self._table.written(job)

    def _hand_on(self, what: str, hand_on: Callable[[], object]) -> None:
        """A finished job's follow-up: a failure is logged and does not undo the written
        outcome (the sweeps of workflows and batches catch up)."""
        try:
            hand_on()
        except Exception:  # noqa: BLE001 - a pluggable part's or the store's failure
            _log.exception(
                "worker %s: handing finished jobs on to the %s failed", self._node_id, what
            )


__all__ = ["WorkerSubscriber"]
