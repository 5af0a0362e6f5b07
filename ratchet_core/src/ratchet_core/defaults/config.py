"""The ``RatchetConfig`` default (:class:`DefaultRatchetConfig`) and its sources, implemented in
:mod:`ratchet_core.runtime.config`.

Every SPI default is importable as ``ratchet_core.defaults.<area>.<Name>`` (the table is in
``docs/overriding-an-spi.md``); this module names those whose code lives with the subsystem
that uses it."""

from __future__ import annotations

from ratchet_core.runtime.config import (
    DefaultRatchetConfig,
    DictConfigSource,
    EnvironmentConfigSource,
    TomlFileConfigSource,
)

__all__ = [
    "DefaultRatchetConfig",
    "DictConfigSource",
    "EnvironmentConfigSource",
    "TomlFileConfigSource",
]
