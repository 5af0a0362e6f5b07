"""The TCK fixture of the example store (here: Ratchet's reference ``InMemoryJobStore``).

A store author writes the same three methods for their own store: ``store`` returns the store
under test, ``cleanup_store`` empties it after each test, ``store_factory`` opens the same
database from another process (None for a process-local store).
"""

from __future__ import annotations

from collections.abc import Callable

from ratchet_api.store.protocols import JobStore
from ratchet_tck import BaseStoreFixture
from ratchet_tck.memory import InMemoryJobStore


class ExampleStoreFixture(BaseStoreFixture):
    def __init__(self) -> None:
        self._store = InMemoryJobStore()

    def store(self) -> JobStore:
        return self._store

    def cleanup_store(self) -> None:
        self._store.clear()

    def store_factory(self) -> Callable[[], JobStore] | None:
        return None  # memory is not shared between processes


def make_fixture() -> ExampleStoreFixture:
    """The zero-argument factory that ``ratchet-tck report --fixture`` calls."""
    return ExampleStoreFixture()
