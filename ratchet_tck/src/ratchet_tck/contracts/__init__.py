"""The contract classes, one per store sub-protocol and capability."""

from ratchet_tck.contracts.base import StoreContract
from ratchet_tck.contracts.claim import JobClaimStoreContract
from ratchet_tck.contracts.crud import JobCrudStoreContract

__all__ = ["JobClaimStoreContract", "JobCrudStoreContract", "StoreContract"]
