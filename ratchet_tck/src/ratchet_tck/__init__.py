"""Ratchet store TCK: contract tests that certify a store, and the compatibility report.

A store's test module certifies the store with::

    import pytest
    from ratchet_tck import StoreFixture, contract_test_classes

    @pytest.fixture
    def tck_fixture() -> Iterator[StoreFixture]: ...

    globals().update(contract_test_classes())
"""

from ratchet_tck.contracts import (
    ArchiveStoreContract,
    BatchStoreContract,
    DualWriteInvariantContract,
    FairClaimStoreContract,
    JobAnalyticsStoreContract,
    JobAuditStoreContract,
    JobBatchStatusStoreContract,
    JobBulkStoreContract,
    JobClaimStoreContract,
    JobCrudStoreContract,
    JobExtensionStoreContract,
    JobPauseStoreContract,
    JobQueryStoreContract,
    JobRetryStoreContract,
    JobTerminalStoreContract,
    LockStoreContract,
    NodeStoreContract,
    QueueStatsStoreContract,
    RecurringJobStoreContract,
    ResourcePermitStoreContract,
    SealedArchiveStoreContract,
    SealedValueStoreContract,
    SignalStoreContract,
    StoreContract,
    StreamingBulkStoreContract,
    TagStoreContract,
    TransactionBoundaryContract,
    WorkerBatchStoreContract,
    WorkflowConditionStoreContract,
)
from ratchet_tck.fixture import BaseStoreFixture, StoreFixture, StoreTransaction, now_ms
from ratchet_tck.registry import ALL_CONTRACTS, contract_test_classes, is_required

__all__ = [
    "ALL_CONTRACTS",
    "ArchiveStoreContract",
    "BaseStoreFixture",
    "BatchStoreContract",
    "DualWriteInvariantContract",
    "JobAnalyticsStoreContract",
    "JobAuditStoreContract",
    "JobBatchStatusStoreContract",
    "JobBulkStoreContract",
    "JobClaimStoreContract",
    "JobCrudStoreContract",
    "JobExtensionStoreContract",
    "SealedArchiveStoreContract",
    "SealedValueStoreContract",
    "JobPauseStoreContract",
    "JobQueryStoreContract",
    "FairClaimStoreContract",
    "QueueStatsStoreContract",
    "WorkerBatchStoreContract",
    "StreamingBulkStoreContract",
    "JobRetryStoreContract",
    "JobTerminalStoreContract",
    "LockStoreContract",
    "NodeStoreContract",
    "RecurringJobStoreContract",
    "ResourcePermitStoreContract",
    "SignalStoreContract",
    "StoreContract",
    "StoreFixture",
    "StoreTransaction",
    "TagStoreContract",
    "TransactionBoundaryContract",
    "WorkflowConditionStoreContract",
    "contract_test_classes",
    "is_required",
    "now_ms",
]
