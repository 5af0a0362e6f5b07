"""Per-job properties set on the builder (``.property(name, value)``): validated when set and
written once, right after the job, through the store's ``JobExtensionStore`` capability (in the
caller's transaction when the job is). They are plaintext and indexed: never put secrets in
them. The masking policy sees them (``MaskingContext.job_properties``)."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from ratchet_api.errors import InvalidJobError, UnsupportedCapabilityError
from ratchet_api.store.entities import MAX_KEY_LENGTH
from ratchet_api.store.protocols import JobExtensionStore, JobStore

MAX_PROPERTY_VALUE_LENGTH = 4000


def check_property(
    store: JobStore, current: Sequence[tuple[str, str]], name: object, value: object
) -> tuple[str, str]:
    """The validated ``(name, value)``; ``InvalidJobError`` naming the problem, or
    ``UnsupportedCapabilityError`` when the store keeps no properties."""
    if store.capability(JobExtensionStore) is None:
        raise UnsupportedCapabilityError("JobExtensionStore", "job properties")
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_KEY_LENGTH:
        raise InvalidJobError(
            f"job option 'property': the name must be a non-empty string of at most "
            f"{MAX_KEY_LENGTH} characters, got {name!r}"
        )
    if not isinstance(value, str) or len(value) > MAX_PROPERTY_VALUE_LENGTH:
        raise InvalidJobError(
            f"job option 'property': the value of {name!r} must be a string of at most "
            f"{MAX_PROPERTY_VALUE_LENGTH} characters, got {type(value).__name__}"
        )
    if any(existing == name for existing, _ in current):
        raise InvalidJobError(
            f"job option 'property': {name!r} is already set (properties are write-once)"
        )
    return name, value


def put_properties(store: JobStore, job_id: UUID, properties: Sequence[tuple[str, str]]) -> None:
    ext = store.capability(JobExtensionStore)
    if ext is None:
        raise UnsupportedCapabilityError("JobExtensionStore", "job properties")
    for name, value in properties:
        ext.put_property(job_id, name, value)


__all__ = ["MAX_PROPERTY_VALUE_LENGTH", "check_property", "put_properties"]
