"""Alternative priorities, mirroring CDI's ``Interceptor.Priority`` constants.

The highest priority registered for an SPI wins. Plain ints: ``Priority.APPLICATION + 100``
beats ``Priority.APPLICATION``.
"""

from __future__ import annotations

from typing import Final


class Priority:
    """Priority constants for alternatives."""

    PLATFORM_BEFORE: Final = 0
    LIBRARY_BEFORE: Final = 0
    """Library defaults: every SPI's default implementation has this priority."""
    LIBRARY_AFTER: Final = 1000
    """Alternatives shipped by libraries (store distributions, adapters)."""
    APPLICATION: Final = 2000
    """Application overrides."""
    LIBRARY_AFTER_APPLICATION: Final = 3000
    PLATFORM_AFTER: Final = 4000


__all__ = ["Priority"]
