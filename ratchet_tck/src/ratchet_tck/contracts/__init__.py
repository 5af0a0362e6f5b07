"""The contract classes, one per store sub-protocol and capability."""

from ratchet_tck.contracts.base import StoreContract
from ratchet_tck.contracts.bulk import JobBulkStoreContract
from ratchet_tck.contracts.claim import JobClaimStoreContract
from ratchet_tck.contracts.coordination import (
    FlowControlStoreContract,
    LockStoreContract,
    ResourcePermitStoreContract,
)
from ratchet_tck.contracts.crud import JobCrudStoreContract
from ratchet_tck.contracts.dual_write import DualWriteInvariantContract
from ratchet_tck.contracts.extension import JobExtensionStoreContract
from ratchet_tck.contracts.fairness import FairClaimStoreContract
from ratchet_tck.contracts.history import (
    ArchiveStoreContract,
    JobAnalyticsStoreContract,
    JobAuditStoreContract,
    JobQueryStoreContract,
)
from ratchet_tck.contracts.joined import JobStoreJoinedContract
from ratchet_tck.contracts.nodes_tags import NodeStoreContract, TagStoreContract
from ratchet_tck.contracts.queues import QueueStatsStoreContract
from ratchet_tck.contracts.scheduling import (
    BatchStoreContract,
    RecurringJobStoreContract,
    SignalStoreContract,
    WorkflowConditionStoreContract,
)
from ratchet_tck.contracts.sealed import SealedArchiveStoreContract, SealedValueStoreContract
from ratchet_tck.contracts.streaming_bulk import StreamingBulkStoreContract
from ratchet_tck.contracts.transaction_boundary import TransactionBoundaryContract
from ratchet_tck.contracts.transitions import (
    JobBatchStatusStoreContract,
    JobPauseStoreContract,
    JobRetryStoreContract,
    JobTerminalStoreContract,
)
from ratchet_tck.contracts.worker_batch import WorkerBatchStoreContract

__all__ = [
    "ArchiveStoreContract",
    "BatchStoreContract",
    "DualWriteInvariantContract",
    "FlowControlStoreContract",
    "JobAnalyticsStoreContract",
    "JobAuditStoreContract",
    "JobBatchStatusStoreContract",
    "JobBulkStoreContract",
    "JobClaimStoreContract",
    "JobCrudStoreContract",
    "JobExtensionStoreContract",
    "SealedArchiveStoreContract",
    "SealedValueStoreContract",
    "JobStoreJoinedContract",
    "JobPauseStoreContract",
    "JobQueryStoreContract",
    "JobRetryStoreContract",
    "JobTerminalStoreContract",
    "LockStoreContract",
    "NodeStoreContract",
    "FairClaimStoreContract",
    "QueueStatsStoreContract",
    "WorkerBatchStoreContract",
    "StreamingBulkStoreContract",
    "RecurringJobStoreContract",
    "ResourcePermitStoreContract",
    "SignalStoreContract",
    "StoreContract",
    "TagStoreContract",
    "TransactionBoundaryContract",
    "WorkflowConditionStoreContract",
]
