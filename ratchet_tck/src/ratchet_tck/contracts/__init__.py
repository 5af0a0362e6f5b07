"""The contract classes, one per store sub-protocol and capability."""

from ratchet_tck.contracts.base import StoreContract
from ratchet_tck.contracts.bulk import JobBulkStoreContract
from ratchet_tck.contracts.claim import JobClaimStoreContract
from ratchet_tck.contracts.crud import JobCrudStoreContract
from ratchet_tck.contracts.nodes_tags import NodeStoreContract, TagStoreContract
from ratchet_tck.contracts.transitions import (
    JobBatchStatusStoreContract,
    JobPauseStoreContract,
    JobRetryStoreContract,
    JobTerminalStoreContract,
)

__all__ = [
    "JobBatchStatusStoreContract",
    "JobBulkStoreContract",
    "JobClaimStoreContract",
    "JobCrudStoreContract",
    "JobPauseStoreContract",
    "JobRetryStoreContract",
    "JobTerminalStoreContract",
    "NodeStoreContract",
    "StoreContract",
    "TagStoreContract",
]
