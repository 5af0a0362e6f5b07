"""Wrapped data keys: ``UnwrappingKeyProvider`` (a ``WrappedKeyProvider``) and
``LocalKeyWrapper``, the local stand-in for a KMS.

Only wrapped data keys are configured; each is unwrapped by the ``KeyWrapper`` when first used
and then kept in memory. With a KMS the wrapper calls its decrypt API (the master key never
leaves the KMS); ``LocalKeyWrapper`` wraps with AES-256-GCM under a local 32-byte wrapping key
and the data key's id as AAD, for development and for deployments whose secret store holds
the wrapping key. See docs/security.md for a worked example.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

from ratchet_api.errors import EncryptionError
from ratchet_api.model import EncryptionKey
from ratchet_api.spi.payload import KeyWrapper
from ratchet_core.payload.encryption import ALGORITHM, KEY_BYTES, KEY_ID_PATTERN, NONCE_BYTES


class LocalKeyWrapper:
    """AES-256-GCM key wrapping with a local wrapping key: ``nonce || ciphertext || tag`` with
    ``ratchet-data-key:<key id>`` as AAD. Thread safe."""

    def __init__(self, wrapping_key: bytes) -> None:
        if len(wrapping_key) != KEY_BYTES:
            raise EncryptionError(
                f"the wrapping key has {len(wrapping_key)} bytes; it must have {KEY_BYTES}"
            )
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._aead = AESGCM(wrapping_key)

    @staticmethod
    def _aad(key_id: str) -> bytes:
        return f"ratchet-data-key:{key_id}".encode()

    def wrap(self, key_id: str, data_key: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, data_key, self._aad(key_id))

    def unwrap(self, key_id: str, wrapped: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag

        try:
            return self._aead.decrypt(
                wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:], self._aad(key_id)
            )
        except (InvalidTag, ValueError):
            raise EncryptionError(
                f"wrapped data key {key_id!r} does not unwrap with this wrapping key (wrong "
                "wrapping key, or the wrapped bytes belong to another key id)"
            ) from None


class UnwrappingKeyProvider:
    """``WrappedKeyProvider`` over ``{key id: wrapped data key}``: each key is unwrapped once,
    on first use, and cached. ``current_key_id`` may be omitted with a single key. Thread
    safe."""

    def __init__(
        self,
        wrapper: KeyWrapper,
        wrapped: Mapping[str, bytes],
        current_key_id: str | None = None,
    ) -> None:
        for key_id in wrapped:
            if not KEY_ID_PATTERN.match(key_id):
                raise EncryptionError(
                    f"key id {key_id[:70]!r} must be 1 to 64 letters, digits, '.', '_' or '-'"
                )
        if current_key_id is None and len(wrapped) == 1:
            current_key_id = next(iter(wrapped))
        if current_key_id is None or current_key_id not in wrapped:
            raise EncryptionError(
                f"current key id {current_key_id!r} is not among the wrapped keys "
                f"({', '.join(wrapped) or 'none'})"
            )
        self._wrapper = wrapper
        self._wrapped = dict(wrapped)
        self._current = current_key_id
        self._plain: dict[str, EncryptionKey] = {}
        self._lock = threading.Lock()

    def wrapped_keys(self) -> Mapping[str, bytes]:
        return dict(self._wrapped)

    def current_key(self) -> EncryptionKey:
        return self.key_by_id(self._current)

    def key_by_id(self, key_id: str) -> EncryptionKey:
        key = self._plain.get(key_id)
        if key is not None:
            return key
        if key_id not in self._wrapped:
            raise EncryptionError(
                f"unknown encryption key id {key_id!r}; wrapped keys: {', '.join(self._wrapped)}. "
                "Keep retired keys while values written with them exist"
            )
        material = self._wrapper.unwrap(key_id, self._wrapped[key_id])
        if len(material) != KEY_BYTES:
            raise EncryptionError(
                f"data key {key_id!r} unwraps to {len(material)} bytes; {KEY_BYTES} are needed"
            )
        key = EncryptionKey(key_id=key_id, material=material, algorithm=ALGORITHM)
        with self._lock:
            self._plain[key_id] = key
        return key


__all__ = ["LocalKeyWrapper", "UnwrappingKeyProvider"]
