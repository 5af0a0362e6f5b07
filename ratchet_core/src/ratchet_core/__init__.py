"""Ratchet engine: the container with priority alternatives, default SPI implementations and
the command line. Import the container from :mod:`ratchet_core.container`."""

from ratchet_core.alternatives import SpiDescription, alternative
from ratchet_core.container import RatchetContainer, RatchetDynamicContainer
from ratchet_core.invocation import circuit_breaker

__all__ = [
    "RatchetContainer",
    "RatchetDynamicContainer",
    "SpiDescription",
    "alternative",
    "circuit_breaker",
]
