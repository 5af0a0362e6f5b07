"""Required and optional members of the SPI protocols.

Some members of an SPI have a default, as the Java original's ``default`` interface methods do.
Such a member is marked ``@optional_member`` in its protocol, and the protocol's body of it *is*
the default:

* a class that subclasses the protocol (``class MyStrategy(ResilienceStrategy): ...``, the
  Python form of ``implements``) inherits the default bodies;
* a class that does not (structural typing) may leave optional members out: the container
  completes the instance it hands out with the protocol's defaults (see
  ``ratchet_core.runtime.alternatives``).

Every other member is required: an alternative lacking one is refused at registration with
``NonConformingAlternativeError`` naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

OPTIONAL_MARK = "__ratchet_optional_member__"


def optional_member(func: F) -> F:
    """Mark a protocol method as optional; its body is the default an implementation that
    leaves it out receives."""
    setattr(func, OPTIONAL_MARK, True)
    return func


def optional_members(protocol: type[Any]) -> frozenset[str]:
    """Names of the members of ``protocol`` (and of the protocols it extends) that have a
    default."""
    names: set[str] = set()
    for base in protocol.__mro__:
        for name, value in vars(base).items():
            if getattr(value, OPTIONAL_MARK, False):
                names.add(name)
    return frozenset(names)


def default_of(protocol: type[Any], name: str) -> Callable[..., Any]:
    """The default body of the optional member ``name`` of ``protocol`` (an unbound function
    taking the instance first). ``LookupError`` if ``name`` is not an optional member."""
    for base in protocol.__mro__:
        value = vars(base).get(name)
        if value is not None and getattr(value, OPTIONAL_MARK, False):
            return value  # type: ignore[no-any-return]
    raise LookupError(f"{protocol.__name__}.{name} is not an optional member")


__all__ = ["OPTIONAL_MARK", "default_of", "optional_member", "optional_members"]
