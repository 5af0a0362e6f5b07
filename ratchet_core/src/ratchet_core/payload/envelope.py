"""The text envelope of an encrypted stored value.

An envelope is one line of ASCII that fits every text column a value came from::

    $rx$<format version>$<algorithm id>$<key id>$<base64url body, unpadded>

The body is the engine's output (``nonce || ciphertext || tag``). ``$`` can start neither JSON
text nor a sanitized error message (those start with a class name), so a stored value is an
envelope exactly when it starts with :data:`PREFIX`, and plaintext written before encryption
was configured stays readable. The format version, algorithm id and key id are in clear (the
reader needs them to pick the engine and the key) and are authenticated: the key id is part of
the AAD, and a changed algorithm id selects an engine that fails authentication.
"""

from __future__ import annotations

import base64
import binascii

import attrs

PREFIX = "$rx$"
FORMAT_VERSION = 1
"""The envelope version this release writes and the newest it reads."""


class MalformedEnvelopeError(ValueError):
    """The value starts like an envelope but its fields cannot be parsed."""


@attrs.frozen(kw_only=True)
class Envelope:
    """The parsed fields of an envelope."""

    version: int
    algorithm_id: str
    key_id: str
    body: bytes = attrs.field(repr=False)

    def to_text(self) -> str:
        encoded = base64.urlsafe_b64encode(self.body).rstrip(b"=").decode("ascii")
        return f"{PREFIX}{self.version}${self.algorithm_id}${self.key_id}${encoded}"


def format_envelope(algorithm_id: str, key_id: str, body: bytes) -> str:
    """The current-version envelope text of ``body`` (``Envelope(...).to_text()`` without the
    intermediate object: this runs once per sealed value)."""
    encoded = base64.urlsafe_b64encode(body).rstrip(b"=").decode("ascii")
    return f"{PREFIX}{FORMAT_VERSION}${algorithm_id}${key_id}${encoded}"


def is_envelope(text: str | None) -> bool:
    """True when ``text`` is an encrypted value (cheap: a prefix test)."""
    return text is not None and text.startswith(PREFIX)


def parse(text: str) -> Envelope:
    """The fields of ``text``; ``MalformedEnvelopeError`` naming the problem."""
    parts = text[len(PREFIX) :].split("$")
    if len(parts) != 4:
        raise MalformedEnvelopeError(f"expected 4 fields after {PREFIX!r}, found {len(parts)}")
    version_text, algorithm_id, key_id, encoded = parts
    if not version_text.isdigit():
        raise MalformedEnvelopeError(f"format version {version_text[:10]!r} is not a number")
    if not algorithm_id or not key_id:
        raise MalformedEnvelopeError("empty algorithm id or key id")
    try:
        body = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    except (binascii.Error, ValueError) as exc:
        raise MalformedEnvelopeError(f"body is not base64url: {exc}") from None
    return Envelope(version=int(version_text), algorithm_id=algorithm_id, key_id=key_id, body=body)


def key_id_of(text: str | None) -> str | None:
    """The key id of an envelope without decoding its body (None for plaintext or garbage)."""
    if not is_envelope(text):
        return None
    assert text is not None
    parts = text[len(PREFIX) :].split("$", 3)
    return parts[2] if len(parts) == 4 and parts[2] else None


__all__ = [
    "FORMAT_VERSION",
    "PREFIX",
    "Envelope",
    "MalformedEnvelopeError",
    "format_envelope",
    "is_envelope",
    "key_id_of",
    "parse",
]
