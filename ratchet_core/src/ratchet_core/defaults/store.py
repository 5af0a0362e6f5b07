"""The ``JobStore`` default (:func:`create_store`): the store that ``store.url`` names, opened
through the ``ratchet.stores`` entry points and adapted to the engine's store SPI version
(:mod:`ratchet_core.runtime.stores`).

Every SPI default is importable as ``ratchet_core.defaults.<area>.<Name>`` (the table is in
``docs/overriding-an-spi.md``); this module names those whose code lives with the subsystem
that uses it."""

from __future__ import annotations

from ratchet_core.runtime.stores import create_store

__all__ = ["create_store"]
