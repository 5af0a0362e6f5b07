"""Public errors of Ratchet.

Every error raised by Ratchet derives from :class:`RatchetError`. Where a builtin fits, the error
also inherits it (``JobNotFoundError`` is a ``LookupError``, argument errors are ``ValueError``),
so code that already catches the builtin keeps working.
"""

from __future__ import annotations

from collections.abc import Iterable
from uuid import UUID


class RatchetError(Exception):
    """Root of every error Ratchet raises."""


class ConfigurationError(RatchetError, ValueError):
    """A configuration value is missing or malformed; the message names the key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"configuration key {key!r}: {message}")
        self.key = key


class UnknownConfigurationKeyError(ConfigurationError):
    """A configuration source sets a key no installed component reads (a typo such as
    ``payload.masking``); ``.suggestion`` is the closest valid key, or None."""

    def __init__(self, key: str, source: str, suggestion: str | None) -> None:
        hint = f"did you mean {suggestion!r}?" if suggestion else "see `ratchet config`"
        super().__init__(key, f"unknown key set by {source}; {hint}")
        self.suggestion = suggestion


class DeploymentError(RatchetError):
    """The container cannot be built (ambiguous or non-conforming alternatives)."""


class AmbiguousAlternativeError(DeploymentError):
    """Two alternatives share the highest priority for one SPI."""

    def __init__(self, spi: str, priority: int, candidates: Iterable[str]) -> None:
        names = sorted(candidates)
        super().__init__(
            f"SPI {spi}: alternatives {' and '.join(names)} both have priority {priority}; "
            "give one of them a higher priority (for example Priority.APPLICATION + 100)"
        )
        self.spi = spi
        self.priority = priority
        self.candidates = tuple(names)


class NonConformingAlternativeError(DeploymentError, TypeError):
    """An alternative does not implement every member of its SPI protocol."""

    def __init__(self, spi: str, candidate: str, missing: Iterable[str]) -> None:
        members = sorted(missing)
        super().__init__(f"alternative {candidate} for SPI {spi} is missing: {', '.join(members)}")
        self.spi = spi
        self.candidate = candidate
        self.missing = tuple(members)


class InvalidJobError(RatchetError, ValueError):
    """A job cannot be created as requested (bad option, bad argument, refused target)."""


class InvalidArgumentError(InvalidJobError):
    """A value given at enqueue cannot be stored as it is: a NaN, infinite or out-of-range delay
    or schedule time, a NUL byte or a lone surrogate in a key, tag, label or argument.
    ``.field`` names the parameter, option or argument; the message names it too."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class LimitExceededError(InvalidJobError):
    """A configured size limit refused a value: an argument payload at enqueue, a job's result
    at completion. ``.limit`` is the configuration key, ``.size`` and ``.maximum`` the sizes in
    bytes."""

    def __init__(self, limit: str, size: int, maximum: int, what: str) -> None:
        super().__init__(
            f"{what} is {size} bytes, over the limit {limit} = {maximum} bytes (raise it in the "
            "configuration, or store large data elsewhere and pass a reference)"
        )
        self.limit = limit
        self.size = size
        self.maximum = maximum


class InvalidTargetError(InvalidJobError):
    """The job target is not an importable, public function or method (lambda, closure, ...)."""


class TargetNotImportableError(InvalidTargetError):
    """The job target cannot be imported in this process: its module is missing or fails to
    import, or it has no such attribute. Refused at enqueue like any ``InvalidTargetError``; at
    dispatch it is a failed attempt, retried with backoff (a worker with older code during a
    rolling deploy), not a security refusal."""


class InvalidScheduleError(InvalidJobError):
    """A recurring schedule is invalid: a malformed cron expression, one that never fires, an
    unknown time zone, an interval under one second, an unknown misfire policy."""


class ClassNotAllowedError(RatchetError, PermissionError):
    """The ``ClassPolicy`` refused a class named by a job target or payload."""

    def __init__(self, class_name: str, where: str = "") -> None:
        suffix = f" ({where})" if where else ""
        super().__init__(
            f"class {class_name!r} is not allowed by the ClassPolicy{suffix}; "
            "add its package prefix to security.allowed_packages "
            "(environment variable RATCHET_SECURITY_ALLOWED_PACKAGES)"
        )
        self.class_name = class_name


class PayloadError(RatchetError, ValueError):
    """A payload or result could not be serialized or restored; names the argument."""


class JobNotFoundError(RatchetError, LookupError):
    """No job with the given id exists in the store."""

    def __init__(self, job_id: UUID | str) -> None:
        super().__init__(f"job {job_id} not found")
        self.job_id = job_id


class RecurringJobNotFoundError(RatchetError, LookupError):
    """No recurring definition with the given id exists."""

    def __init__(self, recurring_id: str) -> None:
        super().__init__(f"recurring job {recurring_id!r} not found")
        self.recurring_id = recurring_id


class InvalidStateTransitionError(RatchetError):
    """The requested transition is not allowed from the job's current status."""


class StoreError(RatchetError):
    """A store operation failed. ``retryable`` is true for transient failures."""

    retryable: bool = False

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class TransientStoreError(StoreError):
    """A transient store failure (network, failover, deadlock); retrying may succeed."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=True)


class StoreDataError(StoreError, ValueError):
    """A stored row or document, or a value about to be stored, is invalid; names the field."""

    def __init__(self, field: str, message: str, *, job_id: UUID | None = None) -> None:
        where = f" of job {job_id}" if job_id is not None else ""
        super().__init__(f"field {field!r}{where}: {message}")
        self.field = field
        self.job_id = job_id


class StoreSpiVersionError(StoreError):
    """A store declares a store SPI version this engine cannot run (another major version), or
    declares its version in a malformed way. ``.store_version`` and ``.supported`` are the two
    versions (None for a malformed declaration)."""

    def __init__(
        self,
        message: str,
        *,
        store_version: object | None = None,
        supported: object | None = None,
    ) -> None:
        super().__init__(message)
        self.store_version = store_version
        self.supported = supported


class DuplicateJobError(StoreError):
    """A job with the same id already exists."""


class UnsupportedCapabilityError(RatchetError, NotImplementedError):
    """The store does not advertise the capability a feature needs."""

    def __init__(self, capability: str, feature: str) -> None:
        super().__init__(
            f"{feature} needs the store capability {capability}, which this store lacks"
        )
        self.capability = capability


class CircuitBreakerOpenError(RatchetError):
    """A call was rejected because the circuit of the named service is open."""

    def __init__(self, service: str) -> None:
        super().__init__(f"circuit breaker for service {service!r} is open")
        self.service = service


class EncryptionError(RatchetError):
    """Encryption or decryption failed (integrity violation, unknown key id, no keys)."""


class EncryptionIntegrityError(EncryptionError):
    """A stored encrypted value failed authentication: it was altered, copied from another job
    or column, or written under other key material for the same key id. Nothing of it was
    decrypted. ``.job_id`` and ``.surface`` name the value."""

    def __init__(self, job_id: UUID, surface: str, detail: str) -> None:
        super().__init__(
            f"encryption integrity violation: {surface} of job {job_id} {detail}; nothing was "
            "decrypted (a value moved between rows or columns, or tampered with, is refused)"
        )
        self.job_id = job_id
        self.surface = surface


class EncryptionVersionSkewError(EncryptionError):
    """A stored value uses an envelope format newer than this release reads (a newer Ratchet
    wrote it). ``.found`` and ``.supported`` are the versions."""

    def __init__(self, job_id: UUID, surface: str, found: int, supported: int) -> None:
        super().__init__(
            f"{surface} of job {job_id} is encrypted in envelope format {found}, but this "
            f"Ratchet reads formats up to {supported}: upgrade ratchet-core on this node"
        )
        self.job_id = job_id
        self.surface = surface
        self.found = found
        self.supported = supported


class JobAuthorizationError(RatchetError, PermissionError):
    """The ``JobAuthorizationPolicy`` refused to create or to execute a job. A refused create
    stores nothing; a refused execution dead-letters the job without running it. ``.target``
    names the job target and ``.reason`` the policy's reason."""

    def __init__(self, target: str, reason: str, *, stage: str = "create") -> None:
        super().__init__(f"job authorization refused to {stage} {target}: {reason}")
        self.target = target
        self.reason = reason
        self.stage = stage


class SchedulerStoppedError(RatchetError, RuntimeError):
    """The scheduler or worker is not running."""


class BatchChunkError(RatchetError):
    """A chunk of a streaming batch could not be written (its factory raised for an item, or
    the store refused the chunk). The chunks before it are committed; calling
    ``streaming_batch`` again with the same name resumes after them. ``batch_id``,
    ``chunk`` (0-based) and ``first_item`` say where; the cause is chained."""

    def __init__(self, batch_id: object, chunk: int, first_item: int, message: str) -> None:
        super().__init__(
            f"streaming batch {batch_id}: chunk {chunk} (items from {first_item}) failed: "
            f"{message}; run it again with the same name to resume after the last committed "
            "chunk"
        )
        self.batch_id = batch_id
        self.chunk = chunk
        self.first_item = first_item


__all__ = [
    "AmbiguousAlternativeError",
    "BatchChunkError",
    "CircuitBreakerOpenError",
    "ClassNotAllowedError",
    "ConfigurationError",
    "DeploymentError",
    "DuplicateJobError",
    "EncryptionError",
    "EncryptionIntegrityError",
    "EncryptionVersionSkewError",
    "InvalidArgumentError",
    "InvalidJobError",
    "InvalidScheduleError",
    "JobAuthorizationError",
    "InvalidStateTransitionError",
    "InvalidTargetError",
    "TargetNotImportableError",
    "JobNotFoundError",
    "LimitExceededError",
    "NonConformingAlternativeError",
    "PayloadError",
    "RecurringJobNotFoundError",
    "RatchetError",
    "SchedulerStoppedError",
    "StoreDataError",
    "StoreError",
    "StoreSpiVersionError",
    "TransientStoreError",
    "UnknownConfigurationKeyError",
    "UnsupportedCapabilityError",
]
