"""AES-256-GCM payload encryption and the settings-backed key provider.

Ciphertext layout: ``nonce (12 random bytes) || AES-GCM ciphertext || 16-byte tag``. The AAD is
``EncryptionContext.associated_data()``, binding the value to its job, surface, namespace and key
id: a ciphertext copied to another job or column fails to decrypt.

Keys come from ``encryption.keys`` (``id1:<base64 32 bytes>,id2:<...>``) and
``encryption.current_key_id`` (which one encrypts new values; optional when exactly one key is
configured). Old keys stay listed while values written under them exist (rotation).
"""

from __future__ import annotations

import base64
import binascii
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ratchet_api.errors import EncryptionError
from ratchet_api.model import EncryptionContext, EncryptionKey
from ratchet_api.spi import RatchetConfig, RatchetConfigKey
from ratchet_core.config import parse_optional_str, register_key

ALGORITHM = "AES-256-GCM"
NONCE_BYTES = 12
TAG_BYTES = 16
KEY_BYTES = 32


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


class AesGcmPayloadEncryption:
    """AES-256-GCM with a random 96-bit nonce per value. Thread safe."""

    def algorithm_id(self) -> str:
        return ALGORITHM

    @staticmethod
    def _cipher(key: EncryptionKey) -> AESGCM:
        if len(key.material) != KEY_BYTES:
            raise EncryptionError(
                f"key {key.key_id!r} has {len(key.material)} bytes; AES-256-GCM needs {KEY_BYTES}"
            )
        return AESGCM(key.material)

    def encrypt(self, plaintext: bytes, key: EncryptionKey, ctx: EncryptionContext) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._cipher(key).encrypt(nonce, plaintext, ctx.associated_data())

    def decrypt(self, ciphertext: bytes, key: EncryptionKey, ctx: EncryptionContext) -> bytes:
        if len(ciphertext) < NONCE_BYTES + TAG_BYTES:
            raise EncryptionError(
                f"{ctx.surface.value} of job {ctx.job_id}: ciphertext of {len(ciphertext)} bytes "
                "is too short to be AES-256-GCM"
            )
        nonce, body = ciphertext[:NONCE_BYTES], ciphertext[NONCE_BYTES:]
        try:
            return self._cipher(key).decrypt(nonce, body, ctx.associated_data())
        except InvalidTag:
            raise EncryptionError(
                f"{ctx.surface.value} of job {ctx.job_id} failed authentication with key "
                f"{key.key_id!r}: the value was altered, copied from another job or field, or "
                "encrypted with another key"
            ) from None


class SettingsKeyProvider:
    """Keys from configuration, read when first asked (so a deployment without encryption
    needs no keys)."""

    def __init__(self, settings: RatchetConfig) -> None:
        self._settings = settings

    def _keys(self) -> dict[str, bytes]:
        keys = self._settings.get(ENCRYPTION_KEYS)
        if not keys:
            raise EncryptionError(
                "no encryption keys configured: set encryption.keys "
                "(env RATCHET_ENCRYPTION_KEYS=<id>:<base64 of 32 bytes>)"
            )
        return keys

    def current_key(self) -> EncryptionKey:
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
        keys = self._keys()
        if key_id not in keys:
            raise EncryptionError(
                f"unknown encryption key id {key_id!r}; configured: {', '.join(keys)}. Keep "
                "retired keys in encryption.keys while values written with them exist"
            )
        return EncryptionKey(key_id=key_id, material=keys[key_id], algorithm=ALGORITHM)


__all__ = [
    "ENCRYPTION_CURRENT_KEY_ID",
    "ENCRYPTION_KEYS",
    "AesGcmPayloadEncryption",
    "SettingsKeyProvider",
    "parse_keys",
]
