"""Security defaults: the class allowlist, the error sanitizer and the payload masking policy."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable

from ratchet_api.model import MaskingContext
from ratchet_api.spi import RatchetConfig, RatchetConfigKey
from ratchet_core.runtime.config import parse_str_list, register_key

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


_log = logging.getLogger("ratchet.security")

ALLOW_ALL_WARNING = (
    "security.allowed_packages is '*': every importable function can be a job target and "
    "anyone who can write to the jobs table can run any of them; list your packages instead "
    "(development only)"
)


def allows_everything(settings: RatchetConfig) -> bool:
    """Whether ``security.allowed_packages`` contains ``*`` (``ratchet enqueue``, ``ratchet
    health`` and the worker say so loudly)."""
    return "*" in (p.strip() for p in settings.get(ALLOWED_PACKAGES))


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
        """The policy of ``security.allowed_packages``; logs :data:`ALLOW_ALL_WARNING` at
        WARNING when it allows everything (the worker's start, an enqueuing process)."""
        prefixes: tuple[str, ...] = settings.get(ALLOWED_PACKAGES)
        policy = cls(prefixes)
        if policy.allow_all:
            _log.warning(ALLOW_ALL_WARNING)
        return policy

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

REDACT_INPUT_LIMIT = 64 * 1024
""":func:`redact` reads at most this many characters of its input (the rest is cut off with a
marker before any pattern runs), so its cost is bounded whatever a job puts in an error."""

_CUT_MARK = " [cut]"

# Every pattern is linear: each starts with a literal or a look-behind that refuses to start
# inside a run of the characters it consumes (so a 1 MB run is scanned once, not from each of
# its positions), and every repetition is bounded. ``benchmarks/bench_sanitizer.py`` measures it.

_WORD = r"A-Za-z0-9_"
# Names of secrets that may be part of a longer name (DB_PASSWORD, PGPASSWORD, aws_secret_key,
# github_token, ...).
_SECRET_PARTS = (
    r"password|passwd|passphrase|secret|token|api[_-]?key|apikey|access[_-]?key|"
    r"private[_-]?key|credentials?"
)
# Short names that are secrets only as a whole word or a ``_``/``-`` separated part of a name
# (DB_PASS, MYSQL_PWD, pin), not inside a word ("bypass", "compass", "spinner").
_SECRET_WORDS = r"pass|pwd|pw|pin|session[_-]?id|auth"
_SECRET_KEY = (
    rf"(?:[{_WORD}\-]{{0,40}}?(?:{_SECRET_PARTS})[{_WORD}\-]{{0,40}}"
    rf"|(?:[{_WORD}\-]{{0,40}}?[_\-])?(?:{_SECRET_WORDS})(?:[_\-][{_WORD}\-]{{0,40}})?)"
)

_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----")


def _luhn_ok(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if index % 2:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def _card(match: re.Match[str]) -> str:
    text = match.group(0)
    digits = "".join(c for c in text if c.isdigit())
    if 13 <= len(digits) <= 19 and _luhn_ok(digits):
        return "***"
    return text


def _aws_secret(match: re.Match[str]) -> str:
    # 40 characters of base64 with both cases and a digit: an AWS secret access key shape. A git
    # commit id (40 lower-case hex digits) is kept.
    text = match.group(0)
    if (
        any(c.isupper() for c in text)
        and any(c.islower() for c in text)
        and any(c.isdigit() for c in text)
    ):
        return "***"
    return text


_Replacement = str | Callable[[re.Match[str]], str]

_PATTERNS: tuple[tuple[re.Pattern[str], _Replacement], ...] = (
    # URL userinfo, including passwords containing '@' or '/': everything from the scheme to the
    # last '@' of the same token (postgresql://u:p@ss/w@host/db -> postgresql://***@host/db).
    (
        re.compile(
            r"(?i)(?<![a-z0-9+.\-])([a-z][a-z0-9+.\-]{0,30}://)[^\s@]{0,512}@(?:[^\s@]{0,512}@)*"
        ),
        r"\1***@",
    ),
    # JDBC style / query-string user names: user=alice&password=x -> user=***&password=***.
    (re.compile(r"(?i)([?&;](?:user|username)=)[^&;\s]{1,512}"), r"\1***"),
    # Authorization headers and bearer tokens.
    (
        re.compile(
            r"(?i)\b(authorization\s{0,8}[:=]\s{0,8})(?:(?:bearer|basic|token)\s{1,8})?\S{1,4096}"
        ),
        r"\1***",
    ),
    (re.compile(r"(?i)\b(bearer|basic)\s{1,8}[A-Za-z0-9._~+/=\-]{8,4096}"), r"\1 ***"),
    # PEM private keys are handled by _redact_pem (the body spans lines).
    # JSON web tokens, bare: header.payload.signature, the first two base64url JSON objects.
    (
        re.compile(
            r"(?<![A-Za-z0-9_\-])eyJ[A-Za-z0-9_\-]{2,8192}\.[A-Za-z0-9_\-]{2,8192}(?:\.[A-Za-z0-9_\-]{0,8192})?"
        ),
        "***",
    ),
    # password=..., DB_PASSWORD=..., PGPASSWORD=..., "token": "...", api-key: ... (quoted or
    # bare values; a name may carry a prefix or suffix: aws_secret_access_key).
    (
        re.compile(
            rf"(?i)([\"']?(?<![{_WORD}\-]){_SECRET_KEY}(?![{_WORD}\-])[\"']?\s{{0,8}}[=:]\s{{0,8}})"
            r"(\"[^\"]{0,4096}\"|'[^']{0,4096}'|[^\s,;&)\]}]{1,4096})"
        ),
        r"\1***",
    ),
    # AWS access key ids.
    (
        re.compile(
            r"(?<![A-Z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}(?![A-Z0-9])"
        ),
        "***",
    ),
    # AWS secret access keys (40 base64 characters, see _aws_secret).
    (re.compile(r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"), _aws_secret),
    # Stripe-style keys: sk_live_..., pk_test_..., rk_live_..., whsec_...
    (
        re.compile(r"(?<![A-Za-z0-9_])(?:(?:sk|pk|rk)_(?:live|test)|whsec)_[A-Za-z0-9]{8,512}"),
        "***",
    ),
    # Card numbers, plain or grouped with spaces or dashes, that pass the Luhn check.
    (re.compile(r"(?<![0-9])[0-9](?:[ \-]?[0-9]){12,18}(?![0-9])"), _card),
    # Email addresses.
    (
        re.compile(
            r"(?<![A-Za-z0-9._%+\-])[A-Za-z0-9._%+\-]{1,64}@[A-Za-z0-9\-]{1,63}(?:\.[A-Za-z0-9\-]{1,63}){1,8}"
        ),
        "***@***",
    ),
)


def _class_name(error: BaseException) -> str:
    cls = type(error)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def bound_text(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters (the cut marked). The part of a token the
    cut splits is dropped too, so that no half of a secret survives the patterns that would
    have recognised the whole (a card number cut after 12 digits)."""
    if len(text) <= limit:
        return text
    head = text[: max(0, limit - len(_CUT_MARK))]
    space = max(head.rfind(" "), head.rfind("\n"), head.rfind("\t"))
    if space >= len(head) - 200:
        head = head[: space + 1]
    return head + _CUT_MARK


def _redact_pem(text: str) -> str:
    """Private keys in PEM form, from BEGIN to END (or to the end of a cut text), by a linear
    scan."""
    out: list[str] = []
    position = 0
    while True:
        begin = _PEM_BEGIN.search(text, position)
        if begin is None:
            out.append(text[position:])
            return "".join(out)
        out.append(text[position : begin.start()])
        out.append("-----BEGIN PRIVATE KEY----- *** -----END PRIVATE KEY-----")
        end = _PEM_END.search(text, begin.end())
        if end is None:
            return "".join(out)
        position = end.end()


def redact(text: str, limit: int = REDACT_INPUT_LIMIT) -> str:
    """``text`` with credentials, URL userinfo, tokens, keys, card numbers and emails replaced by
    ``***``. At most ``limit`` characters are read (:func:`bound_text`): the cost is linear in
    that bound, whatever the input."""
    text = bound_text(text, limit)
    if "PRIVATE KEY-----" in text:
        text = _redact_pem(text)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


class DefaultErrorSanitizer:
    """``<class name>: <redacted message>``, bounded to ``max_length`` characters (2000).

    Keeps the exception class name (qualified for non-builtins) and redacts the message with
    :func:`redact`: URL userinfo (passwords containing ``@`` or ``/`` included),
    ``password=``/``DB_PASSWORD=``/``PGPASSWORD=``/``token=``/``secret=``/``api-key:`` style
    pairs, authorization headers and bearer tokens, bare JWTs, AWS access and secret keys,
    Stripe-style keys, PEM private keys, card numbers (Luhn-checked, plain or grouped) and
    emails. The message is cut to ``max_length`` before any pattern runs, so a 1 MB message costs
    what a 2 KB one does. Never raises: if formatting the message itself fails, the class name
    alone is returned. Thread safe.
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
            long_message = len(message) > self.max_length
            text = f"{name}: {redact(message, self.max_length)}" if message else name
        except Exception:  # noqa: BLE001 - never raise from the sanitizer
            return name[: self.max_length]
        if long_message or len(text) > self.max_length:
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
    "ALLOW_ALL_WARNING",
    "allows_everything",
    "DefaultErrorSanitizer",
    "MASK_FIELDS_PROPERTY",
    "DefaultPayloadMaskingPolicy",
    "PackagePrefixClassPolicy",
    "REDACT_INPUT_LIMIT",
    "bound_text",
    "redact",
]
