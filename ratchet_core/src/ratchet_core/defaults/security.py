"""Security defaults: the class allowlist, the error sanitizer and the payload masking policy."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ratchet_api.model import MaskingContext
from ratchet_api.spi import RatchetConfig, RatchetConfigKey
from ratchet_core.config import parse_str_list, register_key

ALLOWED_PACKAGES: RatchetConfigKey[tuple[str, ...]] = register_key(
    RatchetConfigKey(
        "security.allowed_packages",
        parse_str_list,
        (),
        "Comma separated package prefixes whose classes payloads may name and whose functions "
        "may be job targets (myapp,billing.jobs). Empty by default: nothing user-defined is "
        "allowed until configured. '*' allows everything (development only).",
    )
)


class PackagePrefixClassPolicy:
    """Allows a dotted name when it equals a configured prefix or starts with ``prefix + "."``
    (``myapp`` allows ``myapp.models.Order``, not ``myapplication.X``). A prefix ending with
    ``.`` is matched as given. ``*`` allows every name.

    Standard types (builtins, ``datetime``, ``uuid``, ``decimal``, containers) never reach the
    policy: the payload serializer only asks about user classes (``PayloadSerializer.classes_in``),
    so the allowlist lists the application's own packages only. An empty name is never allowed.
    """

    def __init__(self, allowed_prefixes: Iterable[str] = ()) -> None:
        prefixes = tuple(p.strip() for p in allowed_prefixes if p.strip())
        self.allow_all = "*" in prefixes
        self.prefixes = tuple(p for p in prefixes if p != "*")

    @classmethod
    def from_settings(cls, settings: RatchetConfig) -> PackagePrefixClassPolicy:
        prefixes: tuple[str, ...] = settings.get(ALLOWED_PACKAGES)
        return cls(prefixes)

    def is_allowed(self, class_name: str) -> bool:
        if not class_name or not class_name.strip():
            return False
        if self.allow_all:
            return True
        for prefix in self.prefixes:
            if prefix.endswith("."):
                if class_name.startswith(prefix):
                    return True
            elif class_name == prefix or class_name.startswith(prefix + "."):
                return True
        return False

    def __repr__(self) -> str:
        shown = "*" if self.allow_all else ",".join(self.prefixes)
        return f"PackagePrefixClassPolicy({shown!r})"


# ---------------------------------------------------------------- error sanitizer

MAX_ERROR_LENGTH = 2000
_TRUNCATED = "... [truncated]"

_SECRET_NAMES = (
    r"password|passwd|pwd|pass|secret|client[_-]?secret|token|access[_-]?token|"
    r"refresh[_-]?token|auth[_-]?token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|"
    r"session[_-]?id|credentials?"
)
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # Userinfo of any URL, including database URLs: postgresql://user:pw@host -> ***@host.
    (re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/@?#]+@"), r"\1***@"),
    # JDBC style / query-string credentials: user=alice&password=x -> user=***&password=***.
    (re.compile(r"(?i)([?&;](?:user|username)=)[^&;\s]+"), r"\1***"),
    # Authorization headers and bearer tokens.
    (re.compile(r"(?i)\b(authorization\s*[:=]\s*)(?:bearer|basic|token)?\s*\S+"), r"\1***"),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{8,}"), r"\1 ***"),
    # password=..., "token": "...", api-key: ... (quoted or bare values).
    (
        re.compile(
            rf"(?i)([\"']?\b(?:{_SECRET_NAMES})\b[\"']?\s*[=:]\s*)"
            r"(\"[^\"]*\"|'[^']*'|[^\s,;&)\]}]+)"
        ),
        r"\1***",
    ),
    # Email addresses.
    (re.compile(r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+"), "***@***"),
)


def _class_name(error: BaseException) -> str:
    cls = type(error)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def redact(text: str) -> str:
    """``text`` with credentials, URL userinfo, tokens and emails replaced by ``***``."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


class DefaultErrorSanitizer:
    """``<class name>: <redacted message>``, bounded to ``max_length`` characters (2000).

    Keeps the exception class name (qualified for non-builtins), strips URL userinfo (database
    URLs with credentials), ``password=``/``token=``/``secret=``/``api-key:`` style pairs,
    authorization headers and emails. Never raises: if formatting the message itself fails, the
    class name alone is returned. Thread safe.
    """

    def __init__(self, max_length: int = MAX_ERROR_LENGTH) -> None:
        if max_length < 40:
            raise ValueError(f"max_length must be >= 40, got {max_length}")
        self.max_length = max_length

    def sanitize(self, error: BaseException) -> str:
        name = "UnknownError"
        try:
            name = _class_name(error)
            message = str(error)
        except Exception:  # noqa: BLE001 - a broken __str__ must not break failure handling
            return name[: self.max_length]
        try:
            text = f"{name}: {redact(message)}" if message else name
        except Exception:  # noqa: BLE001 - never raise from the sanitizer
            return name[: self.max_length]
        if len(text) > self.max_length:
            text = text[: self.max_length - len(_TRUNCATED)] + _TRUNCATED
        return text


# ---------------------------------------------------------------- masking

_SENSITIVE_COMPACT = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "apikey",
    "accesskey",
    "privatekey",
    "authorization",
    "credential",
    "creditcard",
    "cardnumber",
    "socialsecurity",
)
_SENSITIVE_WORDS = frozenset({"ssn", "cvv", "cvc", "pin", "pwd", "auth"})
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")


MASK_FIELDS_PROPERTY = "ratchet.mask_fields"
"""Job property naming extra sensitive fields of that job (comma separated)."""


class DefaultPayloadMaskingPolicy:
    """Masks fields whose name mentions a secret, case-insensitively and across ``_``/``-``/``.``
    separators and camelCase: password, passwd, passphrase, secret, token, api key, access key,
    private key, authorization, credential(s), credit card / card number, social security; and
    the whole words ssn, cvv, cvc, pin, pwd, auth (so ``classname`` is not an ``ssn``).
    ``extra_fields`` adds exact names (compared case-insensitively, separators ignored).
    With a context, the comma separated names in the job's ``ratchet.mask_fields`` property
    (set with ``.property("ratchet.mask_fields", "iban,amount")`` on the builder) are sensitive
    for that job too. Thread safe."""

    def __init__(self, extra_fields: Iterable[str] = ()) -> None:
        self.extra = frozenset(_compact(f) for f in extra_fields if f.strip())

    def is_sensitive_field(self, field_name: str, context: MaskingContext | None = None) -> bool:
        if not field_name:
            return False
        compact = _compact(field_name)
        if compact in self.extra:
            return True
        if context is not None:
            listed = context.job_properties.get(MASK_FIELDS_PROPERTY)
            if listed and compact in {_compact(f) for f in listed.split(",") if f.strip()}:
                return True
        if any(marker in compact for marker in _SENSITIVE_COMPACT):
            return True
        words = {w.lower() for w in _WORD_SPLIT.split(field_name) if w}
        return not words.isdisjoint(_SENSITIVE_WORDS)


def _compact(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


__all__ = [
    "ALLOWED_PACKAGES",
    "DefaultErrorSanitizer",
    "MASK_FIELDS_PROPERTY",
    "DefaultPayloadMaskingPolicy",
    "PackagePrefixClassPolicy",
    "redact",
]
