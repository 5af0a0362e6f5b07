"""The store's TCK fixture (what its author wrote from docs/tck.md at the first release)."""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ratchet_tck import BaseStoreFixture
from ratchet_v1_sqlite.store import V1SqliteStore


def _open(path: str) -> V1SqliteStore:
    return V1SqliteStore(path)


class V1SqliteFixture(BaseStoreFixture):
    def __init__(self, path: str) -> None:
        self._path = path
        self._store = V1SqliteStore(path)

    def store(self) -> V1SqliteStore:
        return self._store

    def cleanup_store(self) -> None:
        self._store.clear()

    def store_factory(self) -> Callable[[], V1SqliteStore] | None:
        return functools.partial(_open, self._path)

    def close(self) -> None:
        self._store.close()


@contextmanager
def make_fixture() -> Iterator[V1SqliteFixture]:
    """For ``ratchet-tck report --fixture ratchet_v1_sqlite.tck:make_fixture``: a store on a
    fresh temporary file, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="ratchet-v1-") as folder:
        fixture = V1SqliteFixture(os.path.join(folder, "tck.db"))
        try:
            yield fixture
        finally:
            fixture.close()
