"""The workflow services a ``SchedulerService`` uses (created on first use): signals, and the
settling of the children of a job an operator cancelled."""

from __future__ import annotations

import logging
from typing import Any

from ratchet_api.model import JobStatus
from ratchet_api.spi import ClassPolicy, MetricsCollector, PayloadSerializer
from ratchet_api.store.entities import JobEntity
from ratchet_api.store.protocols import JobStore
from ratchet_core.features.workflow.meta import has_dependents
from ratchet_core.features.workflow.settle import WorkflowSettler
from ratchet_core.features.workflow.signals import SignalService
from ratchet_core.payload.codec import PayloadCodec

_log = logging.getLogger("ratchet.workflow")


class WorkflowServices:
    def __init__(
        self,
        store: JobStore,
        resolver: Any,
        class_policy: ClassPolicy,
        serializer: PayloadSerializer,
        metrics: MetricsCollector,
        *,
        codec: PayloadCodec | None = None,
    ) -> None:
        self.signals = SignalService(store, serializer, metrics, codec)
        self.settler = WorkflowSettler(
            store,
            resolver=resolver,
            class_policy=class_policy,
            serializer=serializer,
            sanitizer=None,
            metrics=metrics,
            codec=codec,
        )
        self._metrics = metrics

    def cancelled(self, job: JobEntity) -> None:
        """``job`` (as it was before) was cancelled: metrics, and its waiting children are
        cancelled now (the worker's sweep does it later if this fails)."""
        if job.status is JobStatus.AWAITING_SIGNAL and job.signal_key is not None:
            self._metrics.signal_cancelled(job.id, job.job_type, job.signal_key)
        if has_dependents(job.workflow):
            try:
                self.settler.settle(job.id)
            except Exception:  # noqa: BLE001 - the maintenance sweep settles them
                _log.warning("cancelling the steps after job %s failed", job.id, exc_info=True)


__all__ = ["WorkflowServices"]
