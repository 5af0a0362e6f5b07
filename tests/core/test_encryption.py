"""AES-256-GCM payload encryption and the settings-backed key provider."""

from __future__ import annotations

import base64
import os
import uuid
from typing import Any

import pytest

from ratchet_api.errors import ConfigurationError, EncryptionError
from ratchet_api.model import EncryptionContext, EncryptionKey, EncryptionSurface
from ratchet_core.payload.encryption import (
    ENCRYPTION_KEYS,
    AesGcmPayloadEncryption,
    SettingsKeyProvider,
)
from ratchet_core.runtime.config import DefaultRatchetConfig

engine = AesGcmPayloadEncryption()
KEY = EncryptionKey(key_id="k1", material=os.urandom(32))


def ctx(
    job_id: uuid.UUID | None = None, surface: EncryptionSurface = EncryptionSurface.PAYLOAD
) -> EncryptionContext:
    return EncryptionContext(job_id=job_id or JOB, surface=surface, key_id="k1")


JOB = uuid.uuid4()


def test_round_trip() -> None:
    plaintext = b'{"card": "4111"}'
    ciphertext = engine.encrypt(plaintext, KEY, ctx())
    assert plaintext not in ciphertext
    assert len(ciphertext) == 12 + len(plaintext) + 16
    assert engine.decrypt(ciphertext, KEY, ctx()) == plaintext
    assert engine.algorithm_id() == "AES-256-GCM"


def test_each_encryption_uses_a_fresh_nonce() -> None:
    a, b = engine.encrypt(b"same", KEY, ctx()), engine.encrypt(b"same", KEY, ctx())
    assert a[:12] != b[:12] and a != b


def test_tampering_is_detected() -> None:
    ciphertext = bytearray(engine.encrypt(b"amount=10", KEY, ctx()))
    ciphertext[15] ^= 0x01
    with pytest.raises(EncryptionError, match="failed authentication"):
        engine.decrypt(bytes(ciphertext), KEY, ctx())


def test_ciphertext_is_bound_to_its_job_and_surface() -> None:
    ciphertext = engine.encrypt(b"secret", KEY, ctx())
    with pytest.raises(EncryptionError, match=str(JOB)) as info:
        engine.decrypt(ciphertext, KEY, ctx(surface=EncryptionSurface.RESULT))
    assert "RESULT" in str(info.value)
    with pytest.raises(EncryptionError):
        engine.decrypt(ciphertext, KEY, ctx(job_id=uuid.uuid4()))


def test_wrong_key_and_short_input_are_refused() -> None:
    ciphertext = engine.encrypt(b"secret", KEY, ctx())
    other = EncryptionKey(key_id="k1", material=os.urandom(32))
    with pytest.raises(EncryptionError):
        engine.decrypt(ciphertext, other, ctx())
    with pytest.raises(EncryptionError, match="too short"):
        engine.decrypt(b"short", KEY, ctx())
    with pytest.raises(EncryptionError, match="32"):
        engine.encrypt(b"x", EncryptionKey(key_id="k1", material=b"16 bytes only!!!"), ctx())


def b64(material: bytes) -> str:
    return base64.b64encode(material).decode()


def keys(values: dict[str, str]) -> SettingsKeyProvider:
    return SettingsKeyProvider(DefaultRatchetConfig.from_dict(values))


def test_key_provider_rotation() -> None:
    old, new = os.urandom(32), os.urandom(32)
    provider = keys(
        {"encryption.keys": f"2024:{b64(old)},2025:{b64(new)}", "encryption.current_key_id": "2025"}
    )
    assert provider.current_key().material == new
    assert provider.key_by_id("2024").material == old
    with pytest.raises(EncryptionError, match="'2023'"):
        provider.key_by_id("2023")


def test_single_key_needs_no_current_id() -> None:
    material = os.urandom(32)
    assert keys({"encryption.keys": f"only:{b64(material)}"}).current_key().key_id == "only"


def test_missing_keys_give_a_clear_error_only_when_asked() -> None:
    provider = keys({})
    with pytest.raises(EncryptionError, match="RATCHET_ENCRYPTION_KEYS"):
        provider.current_key()


def test_several_keys_without_current_id_is_an_error() -> None:
    provider = keys({"encryption.keys": f"a:{b64(os.urandom(32))},b:{b64(os.urandom(32))}"})
    with pytest.raises(EncryptionError, match="current_key_id"):
        provider.current_key()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("k1:not base64!", "not valid base64"),
        (f"k1:{b64(bytes(range(16)))}", "16 bytes"),
        ("no-separator", "<id>:<base64 key>"),
        (f"k1:{b64(bytes(range(32)))},k1:{b64(bytes(range(1, 33)))}", "listed twice"),
    ],
    ids=["not-base64", "short-key", "no-separator", "duplicate-id"],
)
def test_malformed_keys_name_the_configuration_key(raw: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=r"encryption\.keys") as info:
        keys({"encryption.keys": raw}).current_key()
    assert message in str(info.value)


# ---------------------------------------------------------------- envelopes, codec, XChaCha


def _codec(keys: str, current: str | None = None, **extra: str) -> Any:
    from ratchet_core.defaults.metrics import NoOpMetricsCollector
    from ratchet_core.payload.codec import PayloadCodec, create_payload_encryption

    values: dict[str, str] = {"encryption.keys": keys, **extra}
    if current:
        values["encryption.current_key_id"] = current
    settings = DefaultRatchetConfig.from_dict(values)
    return PayloadCodec.from_settings(
        settings,
        create_payload_encryption(settings),
        SettingsKeyProvider(settings),
        NoOpMetricsCollector(),
    )


def _b64() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def test_xchacha_round_trip_and_binding() -> None:
    from ratchet_core.payload.encryption import XChaCha20Poly1305PayloadEncryption

    xchacha = XChaCha20Poly1305PayloadEncryption()
    body = xchacha.encrypt(b"secret", KEY, ctx())
    assert len(body) == 24 + len(b"secret") + 16
    assert xchacha.decrypt(body, KEY, ctx()) == b"secret"
    with pytest.raises(EncryptionError, match="failed authentication"):
        xchacha.decrypt(body, KEY, ctx(job_id=uuid.uuid4()))


def test_envelope_names_version_algorithm_and_key() -> None:
    from ratchet_core.payload import envelope

    codec = _codec(f"k1:{_b64()}", **{"encryption.algorithm": "xchacha20-poly1305"})
    sealed = codec.seal("{}", JOB, EncryptionSurface.RESULT)
    parsed = envelope.parse(sealed)
    assert (parsed.version, parsed.algorithm_id, parsed.key_id) == (1, "XCHACHA20-POLY1305", "k1")
    assert sealed.startswith("$rx$1$XCHACHA20-POLY1305$k1$")
    assert codec.open(sealed, JOB, EncryptionSurface.RESULT) == "{}"


def test_values_written_under_an_old_key_stay_readable_after_rotation() -> None:
    old, new = _b64(), _b64()
    before = _codec(f"old:{old}")
    sealed = before.seal("payload", JOB, EncryptionSurface.PAYLOAD)
    after = _codec(f"old:{old},new:{new}", current="new")
    assert after.open(sealed, JOB, EncryptionSurface.PAYLOAD) == "payload"
    assert after.seal("x", JOB, EncryptionSurface.PAYLOAD).split("$")[4] == "new"
    retired = _codec(f"new:{new}")
    with pytest.raises(EncryptionError, match="unknown encryption key id 'old'"):
        retired.open(sealed, JOB, EncryptionSurface.PAYLOAD)


def test_plaintext_passes_through_and_garbage_envelopes_are_violations() -> None:
    from ratchet_api.errors import EncryptionIntegrityError

    codec = _codec(f"k1:{_b64()}")
    assert codec.open('{"v":1}', JOB, EncryptionSurface.PAYLOAD) == '{"v":1}'
    with pytest.raises(EncryptionIntegrityError, match="not a well-formed envelope"):
        codec.open("$rx$1$AES-256-GCM$k1", JOB, EncryptionSurface.PAYLOAD)


def test_bad_key_ids_and_modes_are_configuration_errors() -> None:
    from ratchet_core.payload.codec import ENCRYPTION_MODE

    with pytest.raises(ConfigurationError, match="key id"):
        DefaultRatchetConfig.from_dict({"encryption.keys": f"a$b:{_b64()}"}).get(ENCRYPTION_KEYS)
    with pytest.raises(ConfigurationError, match="opt_in"):
        DefaultRatchetConfig.from_dict({"encryption.mode": "sometimes"}).get(ENCRYPTION_MODE)


def test_wrapped_keys_unwrap_once_and_refuse_a_relabelled_key() -> None:
    from ratchet_api.spi import WrappedKeyProvider
    from ratchet_core.payload.keys import LocalKeyWrapper, UnwrappingKeyProvider

    wrapper = LocalKeyWrapper(os.urandom(32))
    data = os.urandom(32)
    wrapped = wrapper.wrap("k1", data)
    assert data not in wrapped
    provider = UnwrappingKeyProvider(wrapper, {"k1": wrapped, "k0": wrapper.wrap("k0", data)}, "k1")
    assert isinstance(provider, WrappedKeyProvider)
    assert provider.current_key().material == data
    relabelled = UnwrappingKeyProvider(wrapper, {"k2": wrapped})
    with pytest.raises(EncryptionError, match="does not unwrap"):
        relabelled.current_key()
    other = UnwrappingKeyProvider(LocalKeyWrapper(os.urandom(32)), {"k1": wrapped})
    with pytest.raises(EncryptionError, match="does not unwrap"):
        other.key_by_id("k1")
    with pytest.raises(EncryptionError, match="unknown encryption key id 'zz'"):
        provider.key_by_id("zz")


def test_state_is_bound_to_its_namespace() -> None:
    from ratchet_api.errors import EncryptionIntegrityError

    codec = _codec(f"k1:{_b64()}")
    sealed = codec.seal('{"n":1}', JOB, EncryptionSurface.STATE, "progress")
    assert codec.open(sealed, JOB, EncryptionSurface.STATE, "progress") == '{"n":1}'
    with pytest.raises(EncryptionIntegrityError, match="STATE of job"):
        codec.open(sealed, JOB, EncryptionSurface.STATE, "other")
    with pytest.raises(EncryptionIntegrityError):
        codec.open(sealed, JOB, EncryptionSurface.RESULT, "progress")
