"""Payload SPIs: invocation resolution, serialization, results, encryption."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable
from uuid import UUID

from ratchet_api.model import (
    CircuitBreakerExceptionFilter,
    EncryptionContext,
    EncryptionKey,
    JobInvocation,
    LambdaDescriptor,
    SerializedJobResult,
)


@runtime_checkable
class JobInvocationResolver(Protocol):
    """Turns a callable plus arguments into a persisted ``JobInvocation``. Thread safe.

    Must refuse, with ``InvalidTargetError`` naming the target, anything the worker could not
    import again: lambdas, closures, nested functions, bound methods of arbitrary objects,
    private (``_``-prefixed) targets and objects from ``__main__``. Arguments are converted to
    JSON-representable values through the ``PayloadSerializer``; every class they name must pass
    the ``ClassPolicy`` (``ClassNotAllowedError``).
    """

    def resolve(
        self,
        target: Callable[..., Any],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> JobInvocation: ...


@runtime_checkable
class BulkJobInvocationResolver(Protocol):
    """A ``JobInvocationResolver`` that can also vet one target once for many argument tuples
    (``enqueue_many`` uses it when the active resolver offers it, else calls ``resolve`` per
    tuple)."""

    def resolve_many(
        self, target: Callable[..., Any], arg_tuples: Sequence[Sequence[Any]]
    ) -> list[JobInvocation]:
        """One invocation per tuple; errors name the index of the failing tuple."""
        ...


@runtime_checkable
class LoadedJobTarget(Protocol):
    """A job target located and re-checked at dispatch by a ``TargetLoader``.

    ``owner_class`` is set for a method of a container-provided class: the worker acquires an
    instance with ``BeanResolver.acquire(owner_class)`` and calls
    ``function(instance, *args, **kwargs)``. ``circuit_breaker`` is ``(service, filter)`` from
    ``@circuit_breaker`` or None; ``context_parameters`` names the parameters that receive the
    ``JobContext`` (empty: no context is built)."""

    @property
    def function(self) -> Callable[..., Any]: ...

    @property
    def owner_class(self) -> type | None: ...

    @property
    def is_async(self) -> bool: ...

    @property
    def circuit_breaker(self) -> tuple[str, CircuitBreakerExceptionFilter | None] | None: ...

    @property
    def context_parameters(self) -> frozenset[str]: ...


@runtime_checkable
class TargetLoader(Protocol):
    """The dispatch side of job targets: what the worker needs to run a stored invocation.
    Thread safe.

    ``load`` imports the target again and repeats the enqueue-time checks (importable, public,
    not a lambda, classes allowed by the ``ClassPolicy``, parameter list unchanged). It raises
    ``TargetNotImportableError`` when the target cannot be imported here (a failed attempt,
    retried) and ``InvalidTargetError``, ``ClassNotAllowedError`` or ``PayloadError`` when the
    job must never run as stored (dead letter). ``bind_arguments`` restores the stored arguments
    from the target's type hints and adds ``context`` to the parameters that ask for it; it
    raises ``PayloadError`` naming the argument that cannot be restored."""

    def load(self, invocation: JobInvocation) -> LoadedJobTarget: ...

    def bind_arguments(
        self, loaded: Any, invocation: JobInvocation, context: Any
    ) -> tuple[tuple[Any, ...], dict[str, Any]]: ...


@runtime_checkable
class LambdaAnalyzer(Protocol):
    """Compatibility SPI: metadata of a callable without arguments. Prefer
    ``JobInvocationResolver``."""

    def analyze(self, target: Callable[..., Any]) -> LambdaDescriptor: ...


@runtime_checkable
class PayloadSerializer(Protocol):
    """The JSON boundary for arguments and results. Thread safe. JSON never selects a class:
    restoration is driven only by declared types.

    ``deserialize`` returns None for None or empty text. Failures raise ``PayloadError`` (a
    ``ValueError``) naming what failed.
    """

    def to_json_value(self, value: Any) -> Any:
        """``value`` as JSON-representable data (dicts, lists, str, numbers, bool, None)."""
        ...

    def from_json_value(self, data: Any, declared: Any) -> Any:
        """Restore ``data`` to the declared type (``list[Order]``, ``dict[str, Order]``, sets,
        tuples, attrs/dataclasses, datetime, UUID, Decimal, enums). Where ``declared`` is
        missing, ``Any`` or cannot be restored faithfully (type variables, unions of classes) the
        raw JSON value is returned unchanged. Every class named by ``declared`` passes the
        ``ClassPolicy`` first."""
        ...

    def serialize(self, payload: Any) -> str: ...

    def deserialize(self, text: str | None, declared: Any = Any) -> Any: ...

    def classes_in(self, declared: Any) -> list[str]:
        """Dotted names of the user classes a declared type needs (for ``ClassPolicy``)."""
        ...


@runtime_checkable
class PreExecutionArgResolver(Protocol):
    """Last-moment argument patching before dispatch (after security checks). Only the
    returned invocation's arguments are honoured; returning None or the input keeps the stored
    arguments. Raising fails the attempt through the normal retry path."""

    def resolve_arguments(
        self, job_id: UUID, invocation: JobInvocation
    ) -> JobInvocation | None: ...


@runtime_checkable
class ResultPersistenceStrategy(Protocol):
    """Serializes a job's return value before it is stored on the job."""

    def serialize(self, job_id: UUID, result: Any) -> SerializedJobResult: ...


@runtime_checkable
class PayloadEncryption(Protocol):
    """AEAD engine for data at rest. Owns its nonce; the returned body carries everything
    decryption needs except the key and the associated data (``ctx.associated_data()``).
    ``decrypt`` raises ``EncryptionError`` on any integrity failure. Thread safe."""

    def algorithm_id(self) -> str: ...

    def encrypt(self, plaintext: bytes, key: EncryptionKey, ctx: EncryptionContext) -> bytes: ...

    def decrypt(self, ciphertext: bytes, key: EncryptionKey, ctx: EncryptionContext) -> bytes: ...


@runtime_checkable
class KeyProvider(Protocol):
    """Key storage and rotation: ``current_key`` writes, ``key_by_id`` reads old values. Old keys
    must stay resolvable while any value written under them exists."""

    def current_key(self) -> EncryptionKey: ...

    def key_by_id(self, key_id: str) -> EncryptionKey:
        """Raises ``EncryptionError`` for an unknown id."""
        ...


@runtime_checkable
class KeyWrapper(Protocol):
    """The key-management side of ``WrappedKeyProvider``: wraps (encrypts) and unwraps data keys
    with a master key that never leaves it (AWS KMS Encrypt/Decrypt, GCP KMS, Vault transit, or
    a local wrapping key). ``key_id`` is the data key's id; implementations should bind it to
    the wrapped bytes (as encryption context or AAD) so a wrapped key cannot be relabelled.
    ``unwrap`` raises ``EncryptionError`` when the bytes do not authenticate. Thread safe."""

    def wrap(self, key_id: str, data_key: bytes) -> bytes: ...

    def unwrap(self, key_id: str, wrapped: bytes) -> bytes: ...


@runtime_checkable
class WrappedKeyProvider(KeyProvider, Protocol):
    """A ``KeyProvider`` whose data keys are kept only in wrapped form (envelope encryption of
    the keys themselves): configuration or a secret store holds ``key id -> wrapped key``, the
    ``KeyWrapper`` unwraps a key when it is first needed, and the plaintext key lives only in
    process memory. ``wrapped_keys`` lists what it holds (for ``ratchet keys status`` and
    audits)."""

    def wrapped_keys(self) -> Mapping[str, bytes]: ...


__all__ = [
    "BulkJobInvocationResolver",
    "JobInvocationResolver",
    "LoadedJobTarget",
    "TargetLoader",
    "KeyProvider",
    "KeyWrapper",
    "WrappedKeyProvider",
    "LambdaAnalyzer",
    "PayloadEncryption",
    "PayloadSerializer",
    "PreExecutionArgResolver",
    "ResultPersistenceStrategy",
]
