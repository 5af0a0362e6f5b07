"""Opening the job store named by ``store.url``.

Store distributions register themselves under the entry point group ``ratchet.stores``; the entry
point's name is a URL scheme (``sqlite``, ``postgresql``, ``mysql``, ``mariadb``, ``mongodb``) and
its object is called with the URL. The driver suffix of a SQLAlchemy URL is ignored for the match
(``postgresql+psycopg://`` is handled by the ``postgresql`` entry point).
"""

from __future__ import annotations

import contextlib
import weakref
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from ratchet_api.errors import ConfigurationError, RatchetError, StoreError
from ratchet_api.spi.runtime import RatchetConfig, RatchetConfigKey
from ratchet_api.store.protocols import JobStore, SchemaManager
from ratchet_core.runtime.config import STORE_URL, parse_bool, register_key
from ratchet_core.runtime.store_compat import adapt_store

STORE_AUTO_MIGRATE = register_key(
    RatchetConfigKey(
        "store.auto_migrate",
        parse_bool,
        False,
        "Migrate the store's schema to the newest revision when the store is opened (otherwise "
        "run `ratchet db upgrade`).",
    )
)

ENTRY_POINT_GROUP = "ratchet.stores"

_DISTRIBUTION_FOR_SCHEME = {
    "sqlite": "ratchet-store-sql",
    "postgresql": "ratchet-store-sql[postgresql]",
    "postgres": "ratchet-store-sql[postgresql]",
    "mysql": "ratchet-store-sql[mysql]",
    "mariadb": "ratchet-store-sql[mysql]",
    "mongodb": "ratchet-store-mongo",
    "mongodb+srv": "ratchet-store-mongo",
}


def url_scheme(url: str) -> str:
    """The store scheme of ``url``: ``postgresql+psycopg://...`` gives ``postgresql``."""
    scheme, separator, _ = url.partition("://")
    if not separator:
        scheme, separator, _ = url.partition(":")
    if not separator or not scheme:
        raise ConfigurationError(
            STORE_URL.name,
            f"{_redact(url)!r} is not a URL; expected e.g. sqlite:///ratchet.db or "
            "postgresql+psycopg://user@host/db",
        )
    scheme = scheme.lower()
    if scheme.startswith("mongodb"):
        return scheme
    return scheme.split("+", 1)[0]


def _redact(url: str) -> str:
    head, at, tail = url.rpartition("@")
    if not at:
        return url
    scheme, sep, _ = head.partition("://")
    return f"{scheme}{sep}***@{tail}" if sep else f"***@{tail}"


def store_entry_points() -> dict[str, EntryPoint]:
    """Installed store entry points by scheme."""
    return {ep.name.lower(): ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def redact_url(url: str) -> str:
    """``url`` with its userinfo hidden, for messages."""
    return _redact(url)


def open_store(url: str) -> JobStore:
    """Open the store handling ``url``'s scheme. Raises ``ConfigurationError`` naming
    ``store.url`` (and the distribution to install) when no installed store handles it, and
    ``StoreSpiVersionError`` for a store of a store SPI major version this engine does not run;
    a store of an older minor version is returned adapted (``store_compat.adapt_store``)."""
    scheme = url_scheme(url)
    available = store_entry_points()
    entry_point = available.get(scheme)
    if entry_point is None:
        wanted = _DISTRIBUTION_FOR_SCHEME.get(scheme)
        hint = (
            f"install it with `pip install {wanted}`"
            if wanted
            else "no Ratchet store is known for it"
        )
        installed = ", ".join(sorted(available)) or "none"
        raise ConfigurationError(
            STORE_URL.name,
            f"no installed store handles the scheme {scheme!r} of {_redact(url)!r}: {hint} "
            f"(installed store schemes: {installed})",
        )
    try:
        factory: Any = entry_point.load()
    except ImportError as exc:
        wanted = _DISTRIBUTION_FOR_SCHEME.get(scheme, entry_point.value)
        raise ConfigurationError(
            STORE_URL.name,
            f"the store for {scheme!r} cannot be imported ({exc}); is its driver installed? "
            f"try `pip install {wanted}`",
        ) from exc
    try:
        store: JobStore = factory(url)
    except RatchetError:
        raise
    except ImportError as exc:
        wanted = _DISTRIBUTION_FOR_SCHEME.get(scheme, entry_point.value)
        raise ConfigurationError(
            STORE_URL.name,
            f"the database driver for {_redact(url)!r} is missing ({exc}); "
            f"try `pip install {wanted}`",
        ) from exc
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(
            STORE_URL.name, f"{_redact(url)!r} cannot be opened: {exc}"
        ) from exc
    # The SPI version check: another major version is refused (and the store closed); an older
    # minor one is wrapped so the engine always sees the current SPI (ratchet_core.runtime.store_compat).
    try:
        return adapt_store(store)
    except RatchetError:
        store.close()
        raise


def create_store(settings: RatchetConfig) -> JobStore:
    """The container's ``job_store`` factory: open ``store.url``; with ``store.auto_migrate``
    migrate the schema to the newest revision."""
    store = open_store(settings.get(STORE_URL))
    if settings.get(STORE_AUTO_MIGRATE):
        manager = store.capability(SchemaManager)
        if manager is not None:
            manager.upgrade()
    return store


def require_schema(
    store: JobStore, *, upgrade_command: str = "ratchet db upgrade", remember: bool = False
) -> None:
    """Refuse to start a worker on a store whose schema has not been created (or is older
    than this version's): a ``StoreError`` telling the user to run ``upgrade_command``, instead
    of a worker that loops on "no such table" errors. A store without a ``SchemaManager`` needs
    no schema and passes. With ``remember``, a store found current once by such a call is not
    asked again by the next one (the CLI checks before it builds the worker, the worker again
    when it starts); health checks ask every time."""
    if remember and store in _CURRENT:
        return
    manager = store.capability(SchemaManager)
    if manager is None:
        return
    try:
        current = manager.current_revision()
    except RatchetError:
        raise
    except Exception as exc:  # a driver error the store did not translate
        raise StoreError(f"{store!r}: cannot read the schema revision: {exc}") from exc
    if current is None:
        raise StoreError(
            f"{store!r} has no Ratchet schema yet; run `{upgrade_command}` first "
            "(or set store.auto_migrate=true)"
        )
    head_revision = getattr(manager, "head_revision", None)
    head = head_revision() if callable(head_revision) else None
    if isinstance(head, str) and head != current:
        raise StoreError(
            f"{store!r} has the Ratchet schema at revision {current}; this version of Ratchet "
            f"needs {head}: run `{upgrade_command}` (or set store.auto_migrate=true)"
        )
    if remember:
        with contextlib.suppress(TypeError):  # a store that cannot be weakly referenced
            _CURRENT.add(store)


_CURRENT: weakref.WeakSet[JobStore] = weakref.WeakSet()
"""Stores :func:`require_schema` found at this version's schema revision."""


__all__ = [
    "ENTRY_POINT_GROUP",
    "STORE_AUTO_MIGRATE",
    "create_store",
    "open_store",
    "require_schema",
    "store_entry_points",
    "url_scheme",
]
