"""``PayloadCodec``: the one place where stored job values are sealed and opened.

The scheduler seals a job's invocation at enqueue when the job is encrypted (``.encrypted()``
on the builder, or every job with ``encryption.mode = all``, the default once keys are
configured). Whether a job is encrypted is read back from its stored payload: a job whose
payload is an envelope has its result, its stored error messages and its versioned state
sealed too, under the same key provider, each bound by its AAD to the job, the surface and
(for state) the namespace. Plaintext values (jobs written without encryption) are returned
unchanged, so turning encryption on needs no migration.

Opening a value that fails authentication emits ``encryption_integrity_violation`` and raises
``EncryptionIntegrityError``; an envelope newer than this release emits
``encryption_envelope_version_skew`` and raises ``EncryptionVersionSkewError``. Nothing is ever
returned half-decrypted. Thread safe.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Mapping, Sequence
from uuid import UUID, uuid5

from ratchet_api.errors import (
    EncryptionError,
    EncryptionIntegrityError,
    EncryptionVersionSkewError,
    InvalidJobError,
)
from ratchet_api.model import (
    EncryptionContext,
    EncryptionKey,
    EncryptionSurface,
    JobInvocation,
    StateWriteResult,
    VersionedState,
)
from ratchet_api.spi.payload import KeyProvider, PayloadEncryption
from ratchet_api.spi.runtime import MetricsCollector, RatchetConfig, RatchetConfigKey
from ratchet_api.store.entities import JobEntity
from ratchet_api.store.protocols import JobExtensionStore
from ratchet_core.payload import envelope
from ratchet_core.payload.encryption import (
    ALGORITHM,
    ENCRYPTION_KEYS,
    XCHACHA_ALGORITHM,
    AesGcmPayloadEncryption,
    XChaCha20Poly1305PayloadEncryption,
)
from ratchet_core.payload.forms import decode_invocation
from ratchet_core.runtime.config import register_key

_TEMPLATE_NAMESPACE = UUID("6f1c1d2e-5b1a-4c51-9a83-0d5a3c7e2b10")
"""Namespace of :meth:`PayloadCodec.template_id` (fixed: stored envelopes depend on it)."""


class EncryptionMode(enum.StrEnum):
    """Which jobs are encrypted at enqueue."""

    AUTO = "auto"
    """``all`` when ``encryption.keys`` is set, else ``off``."""
    ALL = "all"
    """Every job."""
    OPT_IN = "opt_in"
    """Only jobs built with ``.encrypted()``."""
    OFF = "off"
    """No job (``.encrypted()`` is refused); stored envelopes are still read."""


def parse_mode(raw: str) -> EncryptionMode:
    text = raw.strip().lower().replace("-", "_")
    try:
        return EncryptionMode(text)
    except ValueError:
        raise ValueError(
            f"expected one of {', '.join(m.value for m in EncryptionMode)}, got {raw!r}"
        ) from None


_ENGINES: dict[str, Callable[[], PayloadEncryption]] = {
    ALGORITHM: AesGcmPayloadEncryption,
    XCHACHA_ALGORITHM: XChaCha20Poly1305PayloadEncryption,
}


def parse_algorithm(raw: str) -> str:
    text = raw.strip().upper().replace("_", "-")
    if text not in _ENGINES:
        raise ValueError(f"expected {' or '.join(_ENGINES)}, got {raw!r}")
    return text


ENCRYPTION_MODE: RatchetConfigKey[EncryptionMode] = register_key(
    RatchetConfigKey(
        "encryption.mode",
        parse_mode,
        EncryptionMode.AUTO,
        "Which jobs are encrypted at enqueue: auto (all when encryption.keys is set, else off), "
        "all, opt_in (only jobs built with .encrypted()) or off. Set all or opt_in when a custom "
        "KeyProvider supplies the keys.",
    )
)
ENCRYPTION_ALGORITHM: RatchetConfigKey[str] = register_key(
    RatchetConfigKey(
        "encryption.algorithm",
        parse_algorithm,
        ALGORITHM,
        "AEAD engine for new values: AES-256-GCM or XCHACHA20-POLY1305 (needs the xchacha extra). "
        "Values are always read with the engine named in their envelope.",
    )
)


def create_payload_encryption(settings: RatchetConfig) -> PayloadEncryption:
    """The engine named by ``encryption.algorithm`` (the container's default PayloadEncryption)."""
    engine: PayloadEncryption = _ENGINES[settings.get(ENCRYPTION_ALGORITHM)]()
    return engine


def _effective_mode(settings: RatchetConfig) -> EncryptionMode:
    mode = settings.get(ENCRYPTION_MODE)
    if mode is EncryptionMode.AUTO:
        return EncryptionMode.ALL if settings.get(ENCRYPTION_KEYS) else EncryptionMode.OFF
    return mode


class PayloadCodec:
    """Seals and opens stored values of jobs (see the module docstring)."""

    def __init__(
        self,
        *,
        encryption: PayloadEncryption,
        key_provider: KeyProvider,
        metrics: MetricsCollector,
        mode: EncryptionMode = EncryptionMode.OFF,
    ) -> None:
        self._writer = encryption
        self._keys = key_provider
        self._metrics = metrics
        self.mode = mode
        self.available = mode is not EncryptionMode.OFF
        """True when jobs may be encrypted at enqueue."""
        self.encrypt_all = mode is EncryptionMode.ALL
        """True when every job is encrypted at enqueue (the scheduler's only per-job check)."""
        self._engines: dict[str, PayloadEncryption] = {encryption.algorithm_id(): encryption}
        self._lock = threading.Lock()

    @classmethod
    def from_settings(
        cls,
        settings: RatchetConfig,
        encryption: PayloadEncryption,
        key_provider: KeyProvider,
        metrics: MetricsCollector,
    ) -> PayloadCodec:
        return cls(
            encryption=encryption,
            key_provider=key_provider,
            metrics=metrics,
            mode=_effective_mode(settings),
        )

    @classmethod
    def disabled(cls) -> PayloadCodec:
        """A codec that never encrypts and cannot decrypt (no keys)."""
        from ratchet_core.defaults.metrics import NoOpMetricsCollector

        return cls(
            encryption=AesGcmPayloadEncryption(),
            key_provider=_NoKeys(),
            metrics=NoOpMetricsCollector(),
        )

    @property
    def key_provider(self) -> KeyProvider:
        return self._keys

    def require_available(self, option: str) -> None:
        """``InvalidJobError`` naming ``option`` when encryption is off (the builder's check)."""
        if not self.available:
            raise InvalidJobError(
                f"job option {option!r}: payload encryption is off; configure keys "
                "(RATCHET_ENCRYPTION_KEYS=<id>:<base64 of 32 bytes>, see `ratchet keys generate`) "
                "or set encryption.mode to all or opt_in with a custom KeyProvider"
            )

    # ------------------------------------------------------------ sealing and opening

    def _engine(self, algorithm_id: str) -> PayloadEncryption | None:
        engine = self._engines.get(algorithm_id)
        if engine is None and algorithm_id in _ENGINES:
            with self._lock:
                engine = self._engines.get(algorithm_id)
                if engine is None:
                    engine = _ENGINES[algorithm_id]()
                    self._engines[algorithm_id] = engine
        return engine

    def seal(self, text: str, job_id: UUID, surface: EncryptionSurface, namespace: str = "") -> str:
        """``text`` encrypted under the current key, as an envelope. ``EncryptionError`` when
        no key is available."""
        key = self._keys.current_key()
        ctx = EncryptionContext(
            job_id=job_id, surface=surface, key_id=key.key_id, namespace=namespace
        )
        body = self._writer.encrypt(text.encode("utf-8"), key, ctx)
        return envelope.format_envelope(self._writer.algorithm_id(), key.key_id, body)

    def open(self, text: str, job_id: UUID, surface: EncryptionSurface, namespace: str = "") -> str:
        """The plaintext of ``text`` (returned unchanged when it is not an envelope).

        Raises ``EncryptionIntegrityError`` (and emits the metric) when the value fails
        authentication or is malformed, ``EncryptionVersionSkewError`` for a newer envelope,
        ``EncryptionError`` when its key id or algorithm is not available here."""
        if not text.startswith(envelope.PREFIX):
            return text
        try:
            parsed = envelope.parse(text)
        except envelope.MalformedEnvelopeError as exc:
            raise self._violation(
                job_id, surface, f"is not a well-formed envelope ({exc})"
            ) from None
        if parsed.version > envelope.FORMAT_VERSION:
            self._metrics.encryption_envelope_version_skew(
                job_id, parsed.version, envelope.FORMAT_VERSION
            )
            raise EncryptionVersionSkewError(
                job_id, surface.value, parsed.version, envelope.FORMAT_VERSION
            )
        engine = self._engine(parsed.algorithm_id)
        if engine is None:
            raise EncryptionError(
                f"{surface.value} of job {job_id} is encrypted with algorithm "
                f"{parsed.algorithm_id!r}, which no engine here provides (known: "
                f"{', '.join(sorted(set(self._engines) | set(_ENGINES)))})"
            )
        key = self._keys.key_by_id(parsed.key_id)
        ctx = EncryptionContext(
            job_id=job_id, surface=surface, key_id=parsed.key_id, namespace=namespace
        )
        try:
            plaintext = engine.decrypt(parsed.body, key, ctx)
        except EncryptionError:
            raise self._violation(
                job_id, surface, f"failed authentication with key {parsed.key_id!r}"
            ) from None
        try:
            return plaintext.decode("utf-8")
        except UnicodeDecodeError:
            raise self._violation(
                job_id, surface, "decrypted to bytes that are not UTF-8"
            ) from None

    def _violation(
        self, job_id: UUID, surface: EncryptionSurface, detail: str
    ) -> EncryptionIntegrityError:
        self._metrics.encryption_integrity_violation(job_id, surface.value)
        return EncryptionIntegrityError(job_id, surface.value, detail)

    # ------------------------------------------------------------ per job

    @staticmethod
    def is_encrypted(job: JobEntity) -> bool:
        """True when the job was encrypted at enqueue (its payload is an envelope)."""
        return job.payload.startswith(envelope.PREFIX)

    @staticmethod
    def is_sealed(text: str | None) -> bool:
        """True when ``text`` is an envelope (a prefix test)."""
        return text is not None and text.startswith(envelope.PREFIX)

    def seal_payload(self, text: str, job_id: UUID) -> str:
        return self.seal(text, job_id, EncryptionSurface.PAYLOAD)

    def open_payload_text(self, job: JobEntity) -> str:
        """The job's stored payload document, decrypted when it is sealed (the trace context
        and the invocation are read from it)."""
        return self.open(job.payload, job.id, EncryptionSurface.PAYLOAD)

    def seal_signal_payload(self, job: JobEntity, text: str | None) -> str | None:
        """The signal payload to store for ``job``: sealed under ``SIGNAL_PAYLOAD`` when the
        job is encrypted."""
        if text is None or not self.is_encrypted(job):
            return text
        return self.seal(text, job.id, EncryptionSurface.SIGNAL_PAYLOAD)

    def open_signal_payload(self, job: JobEntity) -> str | None:
        """The job's signal payload, decrypted (a plaintext one of an encrypted job is an
        integrity violation: the engine only stores it sealed)."""
        if job.signal_payload is None:
            return None
        if self.is_encrypted(job):
            self.require_sealed(job.signal_payload, job.id, EncryptionSurface.SIGNAL_PAYLOAD)
        return self.open(job.signal_payload, job.id, EncryptionSurface.SIGNAL_PAYLOAD)

    def seal_condition(self, text: str, child_id: UUID) -> str:
        """A workflow branch condition (its test, value and predicate arguments), sealed
        under ``PREDICATE`` and the id of the child it releases (the key of its row)."""
        return self.seal(text, child_id, EncryptionSurface.PREDICATE)

    def open_condition(self, text: str, child_id: UUID) -> str:
        return self.open(text, child_id, EncryptionSurface.PREDICATE)

    @staticmethod
    def template_id(recurring_id: str) -> UUID:
        """The id a recurring definition's template is sealed under (a definition has a name,
        not a job id): a name-based UUID, so a template copied to another definition fails
        authentication."""
        return uuid5(_TEMPLATE_NAMESPACE, recurring_id)

    def seal_template(self, text: str, recurring_id: str) -> str:
        """A recurring template's invocation, sealed under ``PAYLOAD`` and the definition's
        :meth:`template_id`."""
        return self.seal(text, self.template_id(recurring_id), EncryptionSurface.PAYLOAD)

    def open_template(self, text: str, recurring_id: str) -> str:
        return self.open(text, self.template_id(recurring_id), EncryptionSurface.PAYLOAD)

    def open_invocation(self, job: JobEntity) -> JobInvocation:
        """The job's invocation, decrypted when it is encrypted."""
        return decode_invocation(self.open(job.payload, job.id, EncryptionSurface.PAYLOAD), job.id)

    def seal_result(self, job: JobEntity, text: str | None) -> str | None:
        """The result text to store for ``job`` (sealed when the job is encrypted)."""
        if text is None or not self.is_encrypted(job):
            return text
        return self.seal(text, job.id, EncryptionSurface.RESULT)

    def seal_error(self, job: JobEntity, message: str) -> str:
        """The error message to store for ``job``. When the job is encrypted and sealing fails
        (no key available), the message is withheld rather than stored in clear."""
        if not self.is_encrypted(job):
            return message
        try:
            return self.seal(message, job.id, EncryptionSurface.ERROR)
        except Exception as exc:  # noqa: BLE001 - a failure path must still write an outcome
            name = message.split(":", 1)[0]
            return f"{name} (message withheld: it could not be encrypted: {exc})"

    def loggable_error(self, job: JobEntity, message: str) -> str:
        """What the job's stored log may say about an error: the message itself for a plaintext
        job, only the exception class for an encrypted one (the message is sealed in
        ``last_error``)."""
        if not self.is_encrypted(job):
            return message
        return f"{message.split(':', 1)[0]} (message stored encrypted in the job's error)"

    def open_result(self, job: JobEntity) -> str | None:
        """The job's result text, decrypted. For an encrypted job a plaintext result is an
        integrity violation (the worker only ever stores it sealed: a plaintext one was put
        there by someone else)."""
        if job.result is None:
            return None
        if self.is_encrypted(job):
            self.require_sealed(job.result, job.id, EncryptionSurface.RESULT)
        return self.open(job.result, job.id, EncryptionSurface.RESULT)

    def require_sealed(
        self, text: str, job_id: UUID, surface: EncryptionSurface, namespace: str = ""
    ) -> None:
        """``EncryptionIntegrityError`` (and the metric) unless ``text`` is an envelope."""
        if not text.startswith(envelope.PREFIX):
            where = f"{namespace!r} " if namespace else ""
            raise self._violation(
                job_id, surface, f"{where}is plaintext although the job is encrypted"
            )

    def open_error(self, job: JobEntity) -> str | None:
        if job.last_error is None:
            return None
        return self.open(job.last_error, job.id, EncryptionSurface.ERROR)

    def state_store(
        self, job: JobEntity, store: JobExtensionStore | None
    ) -> JobExtensionStore | None:
        """``store`` for a running attempt of ``job``: sealing its state when it is encrypted."""
        if store is None or not self.is_encrypted(job):
            return store
        return SealingStateStore(store, self)


class SealingStateStore:
    """A ``JobExtensionStore`` view that seals state on write and opens it on read (namespace
    bound into the AAD). Properties stay plaintext: they are indexed and queried."""

    def __init__(self, inner: JobExtensionStore, codec: PayloadCodec) -> None:
        self._inner = inner
        self._codec = codec

    def put_property(self, job_id: UUID, key: str, value: str) -> bool:
        return self._inner.put_property(job_id, key, value)

    def get_property(self, job_id: UUID, key: str) -> str | None:
        return self._inner.get_property(job_id, key)

    def get_properties_by_prefix(self, job_id: UUID, prefix: str) -> dict[str, str]:
        return self._inner.get_properties_by_prefix(job_id, prefix)

    def properties_for_jobs(self, job_ids: Sequence[UUID]) -> Mapping[UUID, dict[str, str]]:
        return self._inner.properties_for_jobs(job_ids)

    def get_state(self, job_id: UUID, namespace: str) -> VersionedState | None:
        current = self._inner.get_state(job_id, namespace)
        if current is None:
            return None
        self._codec.require_sealed(current.json, job_id, EncryptionSurface.STATE, namespace)
        text = self._codec.open(current.json, job_id, EncryptionSurface.STATE, namespace)
        return VersionedState(json=text, version=current.version)

    def init_state(
        self, job_id: UUID, namespace: str, state: str, expected_claim_seq: int | None = None
    ) -> StateWriteResult:
        sealed = self._codec.seal(state, job_id, EncryptionSurface.STATE, namespace)
        return self._inner.init_state(job_id, namespace, sealed, expected_claim_seq)

    def update_state(
        self,
        job_id: UUID,
        namespace: str,
        state: str,
        expected_version: int,
        expected_claim_seq: int | None = None,
    ) -> StateWriteResult:
        sealed = self._codec.seal(state, job_id, EncryptionSurface.STATE, namespace)
        return self._inner.update_state(
            job_id, namespace, sealed, expected_version, expected_claim_seq
        )


class _NoKeys:
    def current_key(self) -> EncryptionKey:
        raise EncryptionError("no KeyProvider is configured for this component")

    def key_by_id(self, key_id: str) -> EncryptionKey:
        raise EncryptionError(
            f"value encrypted with key {key_id!r} cannot be read: no KeyProvider is configured"
        )


__all__ = [
    "ENCRYPTION_ALGORITHM",
    "ENCRYPTION_MODE",
    "EncryptionMode",
    "PayloadCodec",
    "SealingStateStore",
    "create_payload_encryption",
]
