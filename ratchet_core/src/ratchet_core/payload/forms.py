"""The stored text forms of a job's invocation and backoff policy.

Both are compact JSON objects carrying a format version ``v`` so that a later release can read
jobs written by this one. The invocation's arguments are already JSON values (converted by the
``PayloadSerializer`` at enqueue); this module only frames them.

The framing is written by hand, not through a private cattrs converter as the stores' rows are:
issue 15 asked for one, and ``benchmarks/bench_payload_cattrs.py`` measured it slower on both
hot paths (CPU per call, 2026-12-03: invocation encode 5.0-5.8 us by hand vs 8.0-9.3 with
cattrs, decode 7.0-7.6 vs 7.5-8.0; backoff encode 4.5-4.8 vs 5.7-6.9, decode 9.0-9.2 vs
9.6-10.6). Decoding runs for every claimed job and encoding for every enqueued one, and
``encode_invocations`` encodes the target part once per bulk call, which a converter of the
whole document cannot; the documents are small and flat, so the hand-written checks stay short.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any
from uuid import UUID

from ratchet_api.errors import PayloadError
from ratchet_api.model import BackoffKind, BackoffPolicy, JobInvocation

INVOCATION_FORMAT_VERSION = 1
BACKOFF_FORMAT_VERSION = 1


_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
"""One encoder for every call (``json.dumps`` with options builds a new one each time)."""


def dumps_compact(value: Any) -> str:
    """Compact JSON text; ``ValueError`` for NaN or infinity, ``TypeError`` for non-JSON values."""
    return _COMPACT.encode(value)


def encode_invocation(inv: JobInvocation) -> str:
    """The invocation as compact JSON (``{"v":1,"module":...,"qualname":...,...}``).

    Raises ``PayloadError`` if the arguments are not JSON values (the resolver converts them
    first, so this only happens for a hand-built invocation)."""
    document = {
        "v": INVOCATION_FORMAT_VERSION,
        "module": inv.module,
        "qualname": inv.qualname,
        "static": inv.static,
        "signature": inv.signature,
        "args": list(inv.args),
        "kwargs": dict(inv.kwargs),
    }
    try:
        return dumps_compact(document)
    except (TypeError, ValueError) as exc:
        raise PayloadError(
            f"invocation of {inv.target} has arguments that are not JSON values: {exc}"
        ) from exc


def encode_invocations(invocations: Sequence[JobInvocation]) -> list[str]:
    """``[encode_invocation(i) for i in invocations]``, the same text, built in one pass: the
    part naming the target is encoded once per target, only the arguments per invocation, and
    empty arguments not at all. ``PayloadError`` as :func:`encode_invocation`."""
    out: list[str] = []
    append = out.append
    heads: dict[tuple[str, str, bool, str], str] = {}
    encode = _COMPACT.encode
    for inv in invocations:
        key = (inv.module, inv.qualname, inv.static, inv.signature)
        try:
            head = heads.get(key)
            if head is None:
                head = heads[key] = _head(inv)
            args = encode(list(inv.args)) if inv.args else "[]"
            kwargs = encode(dict(inv.kwargs)) if inv.kwargs else "{}"
        except (TypeError, ValueError) as exc:
            raise PayloadError(
                f"invocation of {inv.target} has arguments that are not JSON values: {exc}"
            ) from exc
        append(f'{head},"args":{args},"kwargs":{kwargs}}}')
    return out


def _head(inv: JobInvocation) -> str:
    """The invocation's document up to its arguments (without the closing brace)."""
    return dumps_compact(
        {
            "v": INVOCATION_FORMAT_VERSION,
            "module": inv.module,
            "qualname": inv.qualname,
            "static": inv.static,
            "signature": inv.signature,
        }
    )[:-1]


def decode_invocation(text: str, job_id: UUID) -> JobInvocation:
    """Parse what :func:`encode_invocation` wrote. ``PayloadError`` names the job and the problem
    (not JSON, unknown format version, a missing or mistyped field)."""

    def bad(problem: str) -> PayloadError:
        return PayloadError(f"stored invocation of job {job_id} is invalid: {problem}")

    try:
        document = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise bad(f"not JSON ({exc})") from exc
    if not isinstance(document, dict):
        raise bad(f"expected a JSON object, got {type(document).__name__}")
    version = document.get("v")
    if version != INVOCATION_FORMAT_VERSION:
        raise bad(
            f"format version {version!r} is not supported (this Ratchet reads version "
            f"{INVOCATION_FORMAT_VERSION}); was it written by a newer release?"
        )
    module = document.get("module")
    qualname = document.get("qualname")
    static = document.get("static", True)
    signature = document.get("signature", "")
    args = document.get("args", [])
    kwargs = document.get("kwargs", {})
    for field, value, expected in (
        ("module", module, str),
        ("qualname", qualname, str),
        ("static", static, bool),
        ("signature", signature, str),
        ("args", args, list),
        ("kwargs", kwargs, dict),
    ):
        if not isinstance(value, expected):
            raise bad(f"field {field!r} must be {expected.__name__}, got {type(value).__name__}")
    if not module or not qualname:
        raise bad("module and qualname must not be empty")
    return JobInvocation(
        module=module,
        qualname=qualname,
        static=static,
        signature=signature,
        args=tuple(args),
        kwargs=kwargs,
    )


def encode_backoff(policy: BackoffPolicy | None) -> str | None:
    """The policy as compact JSON, or None (the engine's default backoff)."""
    if policy is None:
        return None
    return dumps_compact(
        {
            "v": BACKOFF_FORMAT_VERSION,
            "kind": policy.kind.value,
            "initial_ms": _millis(policy.initial),
            "multiplier": policy.multiplier,
            "maximum_ms": _millis(policy.maximum),
            "jitter": policy.jitter,
        }
    )


def decode_backoff(text: str | None) -> BackoffPolicy | None:
    """Parse what :func:`encode_backoff` wrote; None or empty text gives None. ``PayloadError``
    names the bad field."""
    if not text:
        return None
    try:
        document: Any = json.loads(text)
    except ValueError as exc:
        raise PayloadError(f"stored backoff policy is not JSON: {exc}") from exc
    if not isinstance(document, Mapping) or document.get("v") != BACKOFF_FORMAT_VERSION:
        raise PayloadError(f"stored backoff policy has an unsupported format: {text[:100]!r}")
    try:
        return BackoffPolicy(
            kind=BackoffKind(document["kind"]),
            initial=timedelta(milliseconds=float(document["initial_ms"])),
            multiplier=float(document["multiplier"]),
            maximum=timedelta(milliseconds=float(document["maximum_ms"])),
            jitter=bool(document["jitter"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise PayloadError(f"stored backoff policy {text[:100]!r} is invalid: {exc!r}") from exc


def _millis(value: timedelta) -> float:
    millis = value.total_seconds() * 1000.0
    return int(millis) if millis.is_integer() else millis


__all__ = [
    "BACKOFF_FORMAT_VERSION",
    "INVOCATION_FORMAT_VERSION",
    "decode_backoff",
    "decode_invocation",
    "dumps_compact",
    "encode_backoff",
    "encode_invocation",
    "encode_invocations",
]
