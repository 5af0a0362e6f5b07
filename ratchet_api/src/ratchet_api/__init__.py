"""Ratchet's public API: the job model, errors, priorities, every SPI and the store SPI.

This distribution imports without the engine (``ratchet-core``) or any store.
"""

from ratchet_api.errors import (
    AmbiguousAlternativeError,
    CircuitBreakerOpenError,
    ClassNotAllowedError,
    ConfigurationError,
    DeploymentError,
    DuplicateJobError,
    EncryptionError,
    InvalidJobError,
    InvalidStateTransitionError,
    InvalidTargetError,
    JobNotFoundError,
    NonConformingAlternativeError,
    PayloadError,
    RatchetError,
    SchedulerStoppedError,
    StoreDataError,
    StoreError,
    TransientStoreError,
    UnsupportedCapabilityError,
)
from ratchet_api.ids import uuid7
from ratchet_api.model import (
    BackoffPolicy,
    CircuitBreakerConfig,
    CircuitBreakerExceptionFilter,
    EncryptionContext,
    JobInvocation,
    JobPriority,
    JobResult,
    JobStatus,
    JobType,
    JobWakeupHint,
    MaskingContext,
    NodeIdentity,
    StateWriteResult,
    VersionedState,
)
from ratchet_api.priority import Priority
from ratchet_api.scheduler import JobBuilder, JobContext, JobScheduler

__version__ = "0.1.0"

__all__ = [
    "AmbiguousAlternativeError",
    "BackoffPolicy",
    "CircuitBreakerConfig",
    "CircuitBreakerExceptionFilter",
    "CircuitBreakerOpenError",
    "ClassNotAllowedError",
    "ConfigurationError",
    "DeploymentError",
    "DuplicateJobError",
    "EncryptionContext",
    "EncryptionError",
    "InvalidJobError",
    "InvalidStateTransitionError",
    "InvalidTargetError",
    "JobBuilder",
    "JobContext",
    "JobInvocation",
    "JobNotFoundError",
    "JobPriority",
    "JobResult",
    "JobScheduler",
    "JobStatus",
    "JobType",
    "JobWakeupHint",
    "MaskingContext",
    "NodeIdentity",
    "NonConformingAlternativeError",
    "PayloadError",
    "Priority",
    "RatchetError",
    "SchedulerStoppedError",
    "StateWriteResult",
    "StoreDataError",
    "StoreError",
    "TransientStoreError",
    "UnsupportedCapabilityError",
    "VersionedState",
    "uuid7",
]
