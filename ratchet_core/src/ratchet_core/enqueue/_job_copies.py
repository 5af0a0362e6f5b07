"""Many ``JobEntity`` objects that differ from a template only in ``id`` and ``payload``.

A bulk enqueue builds thousands of jobs whose every other field is the same (status, target,
times, options). Building each through ``JobEntity(...)`` runs the same converters and
validators thousands of times on the same values, and ``attrs.evolve`` is slower still. Here
the template is built once through the attrs initializer, so every shared value is validated
once, and the copies are written slot by slot by code generated for ``JobEntity``'s fields.
``id`` and ``payload`` have no converter or validator on ``JobEntity``, so a copy is exactly
what ``attrs.evolve(template, id=..., payload=...)`` gives; the test suite checks that.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from uuid import UUID

import attrs

from ratchet_api.store.entities import JobEntity

_VARYING = ("id", "payload")

Copier = Callable[[JobEntity, Sequence[UUID], Sequence[str]], list[JobEntity]]


def _evolving(template: JobEntity, ids: Sequence[UUID], payloads: Sequence[str]) -> list[JobEntity]:
    return [
        attrs.evolve(template, id=job_id, payload=payload)
        for job_id, payload in zip(ids, payloads, strict=True)
    ]


def _generated() -> Copier:
    """The slot-by-slot copier, or :func:`_evolving` when ``JobEntity`` is not a plain slotted
    attrs class (then the fast path would not be equivalent)."""
    fields = attrs.fields(JobEntity)
    names = [f.name for f in fields]
    plain = all(
        isinstance(JobEntity.__dict__.get(name), types.MemberDescriptorType) for name in names
    ) and not hasattr(JobEntity, "__attrs_post_init__")
    if not plain or any(
        f.converter is not None or f.validator is not None for f in fields if f.name in _VARYING
    ):
        return _evolving
    namespace: dict[str, object] = {"_new": object.__new__, "_cls": JobEntity, "_zip": zip}
    lines = [
        "def copies(template, ids, payloads):",
        *(f"    v_{n} = template.{n}" for n in names if n not in _VARYING),
        "    out = []",
        "    append = out.append",
        "    for id, payload in _zip(ids, payloads, strict=True):",
        "        job = _new(_cls)",
    ]
    for name in names:
        namespace[f"s_{name}"] = JobEntity.__dict__[name].__set__
        value = name if name in _VARYING else f"v_{name}"
        lines.append(f"        s_{name}(job, {value})")
    lines += ["        append(job)", "    return out"]
    exec("\n".join(lines), namespace)
    copier: Copier = namespace["copies"]  # type: ignore[assignment]
    return copier


job_copies: Copier = _generated()
"""``[attrs.evolve(template, id=i, payload=p) for i, p in zip(ids, payloads, strict=True)]``,
several times faster (see the module docstring)."""


__all__ = ["job_copies"]
