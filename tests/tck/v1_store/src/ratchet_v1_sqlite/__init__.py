"""A minimal third-party Ratchet store on ``sqlite3``, written against store SPI 1.0 (FROZEN).

``open_store`` is its ``ratchet.stores`` entry point (scheme ``v1sqlite``):
``v1sqlite:///path/to/file.db`` opens (and creates) the file.
"""

from __future__ import annotations

from ratchet_v1_sqlite.store import V1SqliteStore


def open_store(url: str) -> V1SqliteStore:
    """The entry point: ``v1sqlite:///relative.db`` or ``v1sqlite:////absolute/path.db``."""
    scheme, separator, rest = url.partition("://")
    if scheme != "v1sqlite" or not separator or not rest.startswith("/") or len(rest) < 2:
        raise ValueError(f"expected v1sqlite:///path/to/file.db, got {url!r}")
    return V1SqliteStore(rest[1:])


__all__ = ["V1SqliteStore", "open_store"]
