"""Conformance of an alternative to its SPI protocol: which members a protocol declares and
which of them are required (members marked ``@optional_member`` have a default), what a
candidate lacks, and the completion of an instance that leaves optional members out with the
protocol's defaults (plus the adapters of the Java original's signatures). Used by
:mod:`ratchet_core.runtime.alternatives` at container build."""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any

import attrs

from ratchet_api.spi import PayloadMaskingPolicy, ResilienceStrategy, default_of, optional_members
from ratchet_core.runtime.bindings import lazy

_IGNORED_MEMBERS = frozenset(
    {
        "__abstractmethods__",
        "__annotations__",
        "__dict__",
        "__doc__",
        "__init__",
        "__module__",
        "__parameters__",
        "__orig_bases__",
        "__orig_class__",
        "__protocol_attrs__",
        "__non_callable_proto_members__",
        "__subclasshook__",
        "__weakref__",
        "__slots__",
        "__class_getitem__",
        "__init_subclass__",
        "__type_params__",
        "__static_attributes__",
        "__firstlineno__",
        "_is_protocol",
        "_is_runtime_protocol",
        "__callable_proto_members_only__",
        "__qualname__",
    }
)


def protocol_members(protocol: type[Any]) -> dict[str, bool]:
    """Member names of a Protocol (including inherited protocol members) -> is it a method."""
    members: dict[str, bool] = {}
    for base in reversed(protocol.__mro__):
        if base in (object, typing.Generic) or base.__name__ == "Protocol":
            continue
        # Non-protocol bases such as AbstractContextManager contribute their members too.
        for name in list(base.__dict__) + list(inspect.get_annotations(base)):
            if name in _IGNORED_MEMBERS or (name.startswith("_abc_")):
                continue
            value = base.__dict__.get(name)
            members[name] = callable(value) and not isinstance(value, (property, type))
    return members


def _class_has(cls: type[Any], name: str) -> bool:
    if hasattr(cls, name):
        return True
    if attrs.has(cls) and name in attrs.fields_dict(cls):
        return True
    return any(name in getattr(base, "__annotations__", {}) for base in cls.__mro__)


def required_members(protocol: type[Any]) -> dict[str, bool]:
    """``protocol_members`` without the optional ones (those with a default)."""
    optional = optional_members(protocol)
    return {k: v for k, v in protocol_members(protocol).items() if k not in optional}


def missing_members(protocol: type[Any], candidate: Any) -> list[str]:
    """Required members of ``protocol`` that ``candidate`` (a class or an instance) lacks; a
    method the candidate has as a non-callable attribute is reported as
    ``name (not callable)``. Optional members (``@optional_member``) are not reported."""
    missing: list[str] = []
    is_class = isinstance(candidate, type)
    for name, is_method in required_members(protocol).items():
        present = _class_has(candidate, name) if is_class else hasattr(candidate, name)
        if not present:
            missing.append(name)
        elif is_method and not callable(getattr(candidate, name, None)):
            missing.append(f"{name} (not callable)")
    return missing


def missing_optional_members(protocol: type[Any], candidate: Any) -> list[str]:
    """Optional members of ``protocol`` that ``candidate`` (a class or an instance) leaves out
    (and so receives the protocol's default for)."""
    return sorted(name for name in optional_members(protocol) if not hasattr(candidate, name))


class CompletedAlternative:
    """An alternative instance completed with its SPI's defaults: every member the instance
    has is its own (bound once, so calls cost what they cost on the instance); every optional
    member it leaves out is the protocol's default body bound to this object, so a default
    that calls another member (``BeanResolver.acquire`` calls ``resolve``) reaches the
    instance's. Other attributes are read from the instance. ``__wrapped__`` is the
    instance."""

    def __init__(self, spi: type[Any], instance: Any, defaults: typing.Iterable[str]) -> None:
        self.__wrapped__ = instance
        self._ratchet_spi = spi
        defaulted = frozenset(defaults)
        for name, is_method in protocol_members(spi).items():
            if name in defaulted:
                setattr(self, name, types.MethodType(default_of(spi, name), self))
            elif is_method:
                setattr(self, name, getattr(instance, name))

    def __getattr__(self, name: str) -> Any:
        if name == "__wrapped__":
            raise AttributeError(name)
        return getattr(self.__wrapped__, name)

    def __repr__(self) -> str:
        return f"<{self._ratchet_spi.__name__} {self.__wrapped__!r} completed with defaults>"


_COMPLETERS: dict[type[Any], str] = {
    ResilienceStrategy: "ratchet_core.defaults.resilience.complete_strategy",
    PayloadMaskingPolicy: "ratchet_core.payload.masking.complete_policy",
}
"""SPIs whose completion also adapts a signature of the Java original (imported on use)."""


def adapts_signatures(spi: type[Any]) -> bool:
    """True if ``spi`` has an adapter of a Java original's signature (every instance of it is
    completed, even one that has all members)."""
    return spi in _COMPLETERS


def completes(spi: type[Any]) -> bool:
    """True if instances of ``spi`` may need completing (optional members or a signature
    adapter)."""
    return spi in _COMPLETERS or bool(optional_members(spi))


def complete(spi: type[Any], instance: Any) -> Any:
    """``instance`` as the engine calls it: itself when it implements every member in the
    engine's form, else a :class:`CompletedAlternative` (or the SPI's own adapter) supplying
    the protocol's defaults and adapting the Java original's signatures."""
    path = _COMPLETERS.get(spi)
    if path is not None:
        return lazy(path).resolve()(instance)
    defaults = missing_optional_members(spi, instance)
    return CompletedAlternative(spi, instance, defaults) if defaults else instance


__all__ = [
    "CompletedAlternative",
    "adapts_signatures",
    "complete",
    "completes",
    "missing_members",
    "missing_optional_members",
    "protocol_members",
    "required_members",
]
