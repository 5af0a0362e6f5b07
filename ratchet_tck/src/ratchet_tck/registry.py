"""The list of contracts and the helper that turns them into collectable test classes."""

from __future__ import annotations

from ratchet_tck import contracts as _c
from ratchet_tck.contracts.base import StoreContract

ALL_CONTRACTS: tuple[type[StoreContract], ...] = (
    _c.JobCrudStoreContract,
    _c.JobClaimStoreContract,
    _c.JobTerminalStoreContract,
    _c.JobRetryStoreContract,
    _c.JobPauseStoreContract,
    _c.JobBatchStatusStoreContract,
    _c.JobBulkStoreContract,
    _c.NodeStoreContract,
    _c.TagStoreContract,
    _c.JobStoreJoinedContract,
    _c.TransactionBoundaryContract,
    _c.DualWriteInvariantContract,
    _c.RecurringJobStoreContract,
    _c.BatchStoreContract,
    _c.WorkflowConditionStoreContract,
    _c.SignalStoreContract,
    _c.ResourcePermitStoreContract,
    _c.FlowControlStoreContract,
    _c.LockStoreContract,
    _c.ArchiveStoreContract,
    _c.JobQueryStoreContract,
    _c.JobAnalyticsStoreContract,
    _c.QueueStatsStoreContract,
    _c.FairClaimStoreContract,
    _c.WorkerBatchStoreContract,
    _c.StreamingBulkStoreContract,
    _c.JobAuditStoreContract,
    _c.JobExtensionStoreContract,
    _c.SealedValueStoreContract,
    _c.SealedArchiveStoreContract,
)
"""Every contract: the required (core) ones first, then one per optional capability."""


def is_required(contract: type[StoreContract]) -> bool:
    """A required contract must pass for a store to be compatible; the others may be N/A."""
    return contract.capability is None


def contract_test_classes(
    contracts: tuple[type[StoreContract], ...] = ALL_CONTRACTS,
) -> dict[str, type[StoreContract]]:
    """``{"TestJobCrudStoreContract": <class>, ...}``: collectable subclasses of each contract.

    Use ``globals().update(contract_test_classes())`` in a test module that defines the
    ``tck_fixture`` fixture.
    """
    classes: dict[str, type[StoreContract]] = {}
    for contract in contracts:
        name = f"Test{contract.__name__}"
        classes[name] = type(name, (contract,), {"__test__": True, "__doc__": contract.__doc__})
    return classes


__all__ = ["ALL_CONTRACTS", "contract_test_classes", "is_required"]
