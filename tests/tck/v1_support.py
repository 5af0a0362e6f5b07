"""Helpers for the tests of the frozen store SPI 1.0 store (``tests/tck/v1_store``).

``import_v1_store()`` makes its package importable from the checkout (the slow test installs
it as a distribution instead). ``v1_entry_point(monkeypatch)`` registers its ``ratchet.stores``
entry point for this process only, so ``open_store("v1sqlite:///...")`` and the container open
it exactly as they open an installed store.
"""

from __future__ import annotations

import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

V1_STORE = Path(__file__).resolve().parent / "v1_store"
V1_SRC = V1_STORE / "src"


def import_v1_store() -> None:
    if str(V1_SRC) not in sys.path:
        sys.path.insert(0, str(V1_SRC))


def v1_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    """Add the v1 store's entry point to the installed ones (as its pyproject declares it)."""
    import_v1_store()
    import ratchet_core.runtime.stores as stores

    installed = stores.store_entry_points

    def with_v1() -> dict[str, EntryPoint]:
        found = installed()
        found["v1sqlite"] = EntryPoint(
            name="v1sqlite", value="ratchet_v1_sqlite:open_store", group="ratchet.stores"
        )
        return found

    monkeypatch.setattr(stores, "store_entry_points", with_v1)
