"""The payload-chain SPIs' defaults, implemented in :mod:`ratchet_core.payload`: ``PayloadEncryption``
(:func:`create_payload_encryption`, the AEAD engine ``encryption.algorithm`` selects),
``KeyProvider`` (:class:`SettingsKeyProvider`), ``PayloadSerializer``
(:class:`CattrsPayloadSerializer`) and ``ResultPersistenceStrategy``
(:class:`DefaultResultPersistenceStrategy`).

Every SPI default is importable as ``ratchet_core.defaults.<area>.<Name>`` (the table is in
``docs/overriding-an-spi.md``); this module names those whose code lives with the subsystem
that uses it."""

from __future__ import annotations

from ratchet_core.payload.codec import create_payload_encryption
from ratchet_core.payload.encryption import SettingsKeyProvider
from ratchet_core.payload.serialization import (
    CattrsPayloadSerializer,
    DefaultResultPersistenceStrategy,
)

__all__ = [
    "CattrsPayloadSerializer",
    "DefaultResultPersistenceStrategy",
    "SettingsKeyProvider",
    "create_payload_encryption",
]
