"""The AEAD engines (AES-256-GCM, XChaCha20-Poly1305) and the settings-backed key provider.

Engine body layout: ``nonce || ciphertext || 16-byte tag`` (the nonce is 12 random bytes for
AES-256-GCM, 24 for XChaCha20-Poly1305). The AAD is ``EncryptionContext.associated_data()``,
binding the value to its job, surface, namespace and key id: a ciphertext copied to another job
or column fails to decrypt. The envelope around the body is :mod:`ratchet_core.payload.envelope`.

Keys come from ``encryption.keys`` (``id1:<base64 32 bytes>,id2:<...>``) and
``encryption.current_key_id`` (which one encrypts new values; optional when exactly one key is
configured). Old keys stay listed while values written under them exist (rotation).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import threading
from typing import TYPE_CHECKING, Any

from ratchet_api.errors import EncryptionError
from ratchet_api.model import EncryptionContext, EncryptionKey
from ratchet_api.spi import RatchetConfig, RatchetConfigKey
from ratchet_core.runtime.config import parse_optional_str, register_key

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

# ``cryptography`` (its bundled OpenSSL: about 8 MiB of resident memory) is imported by the
# first key use, not by ``import ratchet_core``: a worker without encryption never loads it.

ALGORITHM = "AES-256-GCM"
XCHACHA_ALGORITHM = "XCHACHA20-POLY1305"
NONCE_BYTES = 12
XCHACHA_NONCE_BYTES = 24
TAG_BYTES = 16
KEY_BYTES = 32
KEY_ID_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
"""Key ids are stored in every envelope: letters, digits, ``.``, ``_``, ``-``; 1 to 64."""


def parse_keys(raw: str) -> dict[str, bytes]:
    """``id:base64,id:base64`` -> ``{id: 32 bytes}``; ``ValueError`` naming the bad entry."""
    keys: dict[str, bytes] = {}
    for entry in (e.strip() for e in raw.split(",")):
        if not entry:
            continue
        key_id, sep, encoded = entry.partition(":")
        key_id = key_id.strip()
        if not sep or not key_id:
            raise ValueError(f"entry {entry[:12]!r}... is not <id>:<base64 key>")
        if not KEY_ID_PATTERN.match(key_id):
            raise ValueError(
                f"key id {key_id[:70]!r} must be 1 to 64 letters, digits, '.', '_' or '-'"
            )
        if key_id in keys:
            raise ValueError(f"key id {key_id!r} is listed twice")
        try:
            material = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"key {key_id!r} is not valid base64") from None
        if len(material) != KEY_BYTES:
            raise ValueError(
                f"key {key_id!r} decodes to {len(material)} bytes; AES-256 needs {KEY_BYTES}"
            )
        keys[key_id] = material
    return keys


ENCRYPTION_KEYS: RatchetConfigKey[dict[str, bytes]] = register_key(
    RatchetConfigKey(
        "encryption.keys",
        parse_keys,
        {},
        "Encryption keys as id:base64 pairs, comma separated (each 32 random bytes, e.g. "
        "`python -c 'import os,base64;print(base64.b64encode(os.urandom(32)).decode())'`).",
    )
)
ENCRYPTION_CURRENT_KEY_ID: RatchetConfigKey[str | None] = register_key(
    RatchetConfigKey(
        "encryption.current_key_id",
        parse_optional_str,
        None,
        "Id (from encryption.keys) of the key that encrypts new values; optional with one key.",
    )
)


def _check_material(key: EncryptionKey, algorithm: str) -> None:
    if len(key.material) != KEY_BYTES:
        raise EncryptionError(
            f"key {key.key_id!r} has {len(key.material)} bytes; {algorithm} needs {KEY_BYTES}"
        )


class AesGcmPayloadEncryption:
    """AES-256-GCM with a random 96-bit nonce per value. Thread safe.

    A random 96-bit nonce is safe for about 2**32 values per key (NIST SP 800-38D); rotate keys
    well before that (``ratchet keys rotate``), or use XChaCha20-Poly1305, whose 192-bit random
    nonces have no practical limit."""

    def __init__(self) -> None:
        self._ciphers: dict[tuple[str, bytes], AESGCM] = {}
        self._lock = threading.Lock()

    def algorithm_id(self) -> str:
        return ALGORITHM

    def _cipher(self, key: EncryptionKey) -> AESGCM:
        cache_key = (key.key_id, key.material)
        cipher = self._ciphers.get(cache_key)
        if cipher is None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            _check_material(key, ALGORITHM)
            cipher = AESGCM(key.material)
            with self._lock:
                if len(self._ciphers) > 64:  # a provider minting keys must not grow this forever
                    self._ciphers.clear()
                self._ciphers[cache_key] = cipher
        return cipher

    def encrypt(self, plaintext: bytes, key: EncryptionKey, ctx: EncryptionContext) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._cipher(key).encrypt(nonce, plaintext, ctx.associated_data())

    def decrypt(self, ciphertext: bytes, key: EncryptionKey, ctx: EncryptionContext) -> bytes:
        if len(ciphertext) < NONCE_BYTES + TAG_BYTES:
            raise EncryptionError(
                f"{ctx.surface.value} of job {ctx.job_id}: ciphertext of {len(ciphertext)} bytes "
                "is too short to be AES-256-GCM"
            )
        from cryptography.exceptions import InvalidTag

        nonce, body = ciphertext[:NONCE_BYTES], ciphertext[NONCE_BYTES:]
        try:
            return self._cipher(key).decrypt(nonce, body, ctx.associated_data())
        except InvalidTag:
            raise EncryptionError(
                f"{ctx.surface.value} of job {ctx.job_id} failed authentication with key "
                f"{key.key_id!r}: the value was altered, copied from another job or field, or "
                "encrypted with another key"
            ) from None


class XChaCha20Poly1305PayloadEncryption:
    """XChaCha20-Poly1305 (libsodium through PyNaCl, the ``xchacha`` extra of ratchet-core) with
    a random 192-bit nonce per value. Thread safe. Raises ``EncryptionError`` at construction
    when PyNaCl is not installed."""

    def __init__(self) -> None:
        try:
            from nacl import bindings, exceptions
        except ImportError:
            raise EncryptionError(
                f"{XCHACHA_ALGORITHM} needs PyNaCl: pip install 'ratchet-core[xchacha]'"
            ) from None
        self._bindings: Any = bindings
        self._crypto_error: type[Exception] = exceptions.CryptoError

    def algorithm_id(self) -> str:
        return XCHACHA_ALGORITHM

    def encrypt(self, plaintext: bytes, key: EncryptionKey, ctx: EncryptionContext) -> bytes:
        _check_material(key, XCHACHA_ALGORITHM)
        nonce = os.urandom(XCHACHA_NONCE_BYTES)
        body: bytes = self._bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(
            plaintext, ctx.associated_data(), nonce, key.material
        )
        return nonce + body

    def decrypt(self, ciphertext: bytes, key: EncryptionKey, ctx: EncryptionContext) -> bytes:
        _check_material(key, XCHACHA_ALGORITHM)
        if len(ciphertext) < XCHACHA_NONCE_BYTES + TAG_BYTES:
            raise EncryptionError(
                f"{ctx.surface.value} of job {ctx.job_id}: ciphertext of {len(ciphertext)} bytes "
                f"is too short to be {XCHACHA_ALGORITHM}"
            )
        nonce, body = ciphertext[:XCHACHA_NONCE_BYTES], ciphertext[XCHACHA_NONCE_BYTES:]
        try:
            plaintext: bytes = self._bindings.crypto_aead_xchacha20poly1305_ietf_decrypt(
                body, ctx.associated_data(), nonce, key.material
            )
        except self._crypto_error:
            raise EncryptionError(
                f"{ctx.surface.value} of job {ctx.job_id} failed authentication with key "
                f"{key.key_id!r}: the value was altered, copied from another job or field, or "
                "encrypted with another key"
            ) from None
        return plaintext


class SettingsKeyProvider:
    """Keys from configuration, read when first asked (so a deployment without encryption
    needs no keys). Configuration does not change while a process runs, so the answers are
    memoized (the hot path of every sealed value)."""

    def __init__(self, settings: RatchetConfig) -> None:
        self._settings = settings
        self._current: EncryptionKey | None = None
        self._by_id: dict[str, EncryptionKey] = {}

    def _keys(self) -> dict[str, bytes]:
        keys = self._settings.get(ENCRYPTION_KEYS)
        if not keys:
            raise EncryptionError(
                "no encryption keys configured: set encryption.keys "
                "(env RATCHET_ENCRYPTION_KEYS=<id>:<base64 of 32 bytes>)"
            )
        return keys

    def current_key(self) -> EncryptionKey:
        if self._current is None:
            self._current = self._resolve_current()
        return self._current

    def _resolve_current(self) -> EncryptionKey:
        keys = self._keys()
        key_id = self._settings.get(ENCRYPTION_CURRENT_KEY_ID)
        if key_id is None:
            if len(keys) != 1:
                raise EncryptionError(
                    f"{len(keys)} encryption keys are configured ({', '.join(keys)}); set "
                    "encryption.current_key_id (env RATCHET_ENCRYPTION_CURRENT_KEY_ID) to the "
                    "one that encrypts new values"
                )
            key_id = next(iter(keys))
        if key_id not in keys:
            raise EncryptionError(
                f"encryption.current_key_id is {key_id!r}, which is not in encryption.keys "
                f"({', '.join(keys)})"
            )
        return EncryptionKey(key_id=key_id, material=keys[key_id], algorithm=ALGORITHM)

    def key_by_id(self, key_id: str) -> EncryptionKey:
        key = self._by_id.get(key_id)
        if key is not None:
            return key
        keys = self._keys()
        if key_id not in keys:
            raise EncryptionError(
                f"unknown encryption key id {key_id!r}; configured: {', '.join(keys)}. Keep "
                "retired keys in encryption.keys while values written with them exist"
            )
        key = EncryptionKey(key_id=key_id, material=keys[key_id], algorithm=ALGORITHM)
        self._by_id[key_id] = key
        return key


__all__ = [
    "ALGORITHM",
    "ENCRYPTION_CURRENT_KEY_ID",
    "ENCRYPTION_KEYS",
    "KEY_ID_PATTERN",
    "XCHACHA_ALGORITHM",
    "AesGcmPayloadEncryption",
    "XChaCha20Poly1305PayloadEncryption",
    "SettingsKeyProvider",
    "parse_keys",
]
