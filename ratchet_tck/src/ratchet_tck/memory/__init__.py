"""``InMemoryJobStore``: the reference store that implements the whole store SPI in memory.

It is thread safe (one re-entrant lock guards every collection), keeps nothing across processes
and cannot join a caller's transaction. It certifies itself against every TCK contract and is the
worked example of ``docs/tck.md``; it is also handy in application unit tests.
"""

from __future__ import annotations

from ratchet_tck.fixture import BaseStoreFixture
from ratchet_tck.memory._capabilities import (
    AnalyticsMixin,
    ArchiveMixin,
    AuditMixin,
    BatchMixin,
    ExtensionMixin,
    FairClaimMixin,
    FlowControlMixin,
    LockMixin,
    QueryMixin,
    QueueStatsMixin,
    RecurringMixin,
    ResourcePermitMixin,
    SignalMixin,
    StreamingBulkMixin,
    WorkflowConditionMixin,
)
from ratchet_tck.memory._core import CoreMemoryStore
from ratchet_tck.memory._sealed import MemorySealedValueMixin
from ratchet_tck.memory._worker_batch import WorkerBatchMixin


class InMemoryJobStore(
    RecurringMixin,
    BatchMixin,
    WorkflowConditionMixin,
    SignalMixin,
    ResourcePermitMixin,
    FlowControlMixin,
    LockMixin,
    ArchiveMixin,
    QueryMixin,
    AnalyticsMixin,
    QueueStatsMixin,
    FairClaimMixin,
    WorkerBatchMixin,
    StreamingBulkMixin,
    AuditMixin,
    ExtensionMixin,
    MemorySealedValueMixin,
):
    """Every mandatory protocol and every capability, kept in process memory."""


class InMemoryStoreFixture(BaseStoreFixture):
    """The TCK fixture of ``InMemoryJobStore``: ``ratchet-tck report --fixture
    ratchet_tck.memory:InMemoryStoreFixture`` certifies it. Process local, so the
    multi-process claim tests skip."""

    def __init__(self) -> None:
        self._store = InMemoryJobStore()

    def store(self) -> InMemoryJobStore:
        return self._store

    def cleanup_store(self) -> None:
        self._store.clear()


__all__ = ["CoreMemoryStore", "InMemoryJobStore", "InMemoryStoreFixture"]
