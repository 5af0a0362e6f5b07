"""Masking of payload values in read views (``scheduler.detail``, ``ratchet jobs show/list``).

With ``security.mask_payloads`` on, every value whose field name the ``PayloadMaskingPolicy``
calls sensitive is replaced by ``"***"``: keyword arguments by name, positional arguments by
their parameter name (from the signature recorded at enqueue), and keys of nested objects at
any depth, in arguments and in structured results. The policy receives a ``MaskingContext``
with the job's id and its properties, so a job can name extra sensitive fields in its
``ratchet.mask_fields`` property. A name-only policy (``is_sensitive_field(field_name)``, the
Java original's first form) keeps working: it is called with the name alone
(:func:`complete_policy`), and so decides by name only. Masking never changes what is stored or
what a worker receives.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from ratchet_api.model import JobInvocation, MaskingContext
from ratchet_api.spi.policies import PayloadMaskingPolicy
from ratchet_api.spi.runtime import RatchetConfigKey
from ratchet_core.runtime.config import parse_bool, register_key

MASK = "***"

MASK_PAYLOADS: RatchetConfigKey[bool] = register_key(
    RatchetConfigKey(
        "security.mask_payloads",
        parse_bool,
        False,
        "Mask sensitive fields (password, token, ... per the PayloadMaskingPolicy, plus the "
        "fields a job lists in its ratchet.mask_fields property) in scheduler.detail() and "
        "`ratchet jobs show/list`. Stored values and what workers receive are unchanged.",
    ),
    env_aliases=("RATCHET_MASK_PAYLOADS",),
)


def positional_names(signature: str) -> tuple[list[str], str | None]:
    """The names positional arguments bind to, from a recorded signature text, without
    ``JobContext`` parameters; and the name of ``*args`` (None without one)."""
    inner = signature.strip()
    if inner.startswith("(") and inner.endswith(")"):
        inner = inner[1:-1]
    parts: list[str] = []
    current: list[str] = []
    depth, quote = 0, ""
    for char in inner:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    names: list[str] = []
    for part in (p.strip() for p in parts):
        name, _, annotation = part.partition(":")
        name = name.split("=", 1)[0].strip()
        if annotation.split("=", 1)[0].strip().endswith("JobContext") or name in ("", "/"):
            continue
        if name.startswith("*"):
            star = name.lstrip("*")
            return names, (star if star and not name.startswith("**") else None)
        names.append(name)
    return names, None


def takes_context(is_sensitive_field: Any) -> bool:
    """True if a policy's bound ``is_sensitive_field`` accepts the ``MaskingContext`` as its
    second argument; False for a name-only ``is_sensitive_field(field_name)``."""
    try:
        signature = inspect.signature(is_sensitive_field)
    except (TypeError, ValueError):  # a builtin or C callable: assume the full form
        return True
    try:
        signature.bind("field", None)
    except TypeError:
        return False
    return True


class NameOnlyMaskingPolicy:
    """A name-only policy in the form the read views call: ``is_sensitive_field(name,
    context)`` asks the policy about the name alone (the Java original's default of the
    context-aware overload). ``__wrapped__`` is the policy."""

    def __init__(self, policy: Any) -> None:
        self.__wrapped__ = policy
        self._by_name = policy.is_sensitive_field

    def is_sensitive_field(self, field_name: str, context: MaskingContext | None = None) -> bool:
        return bool(self._by_name(field_name))

    def __getattr__(self, name: str) -> Any:
        if name == "__wrapped__":
            raise AttributeError(name)
        return getattr(self.__wrapped__, name)

    def __repr__(self) -> str:
        return f"NameOnlyMaskingPolicy({self.__wrapped__!r})"


def complete_policy(policy: Any) -> PayloadMaskingPolicy:
    """``policy`` itself when its ``is_sensitive_field`` takes the context, else a
    :class:`NameOnlyMaskingPolicy` around it (the container applies this to every
    ``PayloadMaskingPolicy`` alternative, and :class:`PayloadMasker` to the policy it gets)."""
    if isinstance(policy, NameOnlyMaskingPolicy) or takes_context(policy.is_sensitive_field):
        return policy  # type: ignore[no-any-return]
    return NameOnlyMaskingPolicy(policy)


class PayloadMasker:
    """Applies a ``PayloadMaskingPolicy`` to decoded payload values. Thread safe."""

    def __init__(self, policy: PayloadMaskingPolicy, *, enabled: bool) -> None:
        self.policy = complete_policy(policy)
        self.enabled = enabled

    def _sensitive(self, name: str, context: MaskingContext) -> bool:
        return self.policy.is_sensitive_field(name, context)

    def mask(self, value: Any, context: MaskingContext) -> Any:
        """``value`` with the values of sensitive keys replaced, at any depth."""
        if not self.enabled:
            return value
        if isinstance(value, Mapping):
            return {
                k: MASK
                if isinstance(k, str) and self._sensitive(k, context)
                else self.mask(v, context)
                for k, v in value.items()
            }
        if isinstance(value, (list, tuple)):
            return [self.mask(v, context) for v in value]
        return value

    def mask_arguments(
        self, invocation: JobInvocation, context: MaskingContext
    ) -> tuple[list[Any], dict[str, Any]]:
        """The invocation's arguments with sensitive ones (by parameter name) masked."""
        args, kwargs = list(invocation.args), dict(invocation.kwargs)
        if not self.enabled:
            return args, kwargs
        names, star = positional_names(invocation.signature)
        masked_args: list[Any] = []
        for index, value in enumerate(args):
            name = names[index] if index < len(names) else (star or "")
            masked_args.append(
                MASK if name and self._sensitive(name, context) else self.mask(value, context)
            )
        masked_kwargs = {
            k: MASK if self._sensitive(k, context) else self.mask(v, context)
            for k, v in kwargs.items()
        }
        return masked_args, masked_kwargs


__all__ = [
    "MASK",
    "MASK_PAYLOADS",
    "NameOnlyMaskingPolicy",
    "PayloadMasker",
    "complete_policy",
    "positional_names",
    "takes_context",
]
