"""Django settings as a Ratchet configuration source, and ``DATABASES`` as the default store.

``settings.RATCHET`` is a dict of Ratchet keys, nested (``{"store": {"url": ...}}``) or dotted
(``{"store.url": ...}``). Without ``store.url`` anywhere (``RATCHET``, ``RATCHET_STORE_URL`` in
the environment, ``ratchet.toml``), the store lives in the Django database named by
``django.database`` (default ``"default"``), converted to a SQLAlchemy URL.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from ratchet_api.errors import ConfigurationError
from ratchet_api.spi.runtime import RatchetConfigKey
from ratchet_core.runtime.config import _to_raw, parse_bool, parse_str, register_key

DATABASE = register_key(
    RatchetConfigKey(
        "django.database",
        parse_str,
        "default",
        "Django only: the DATABASES alias the store follows when store.url is not set, and "
        "whose transactions ratchet_core.contrib.django.enqueue joins.",
    )
)
MIGRATE_WITH_DJANGO = register_key(
    RatchetConfigKey(
        "django.migrate",
        parse_bool,
        True,
        "Django only: `manage.py migrate` of the store's database also upgrades Ratchet's "
        "tables (the same as `manage.py ratchet_migrate`).",
    )
)

SETTING = "RATCHET"
"""The Django setting holding Ratchet's configuration."""
CONTAINER_SETTING = "RATCHET_CONTAINER"
"""The Django setting naming the application's container (``"myproject.containers.Container"``
or a zero-argument factory); optional."""

CONTRIB_PACKAGE = "ratchet_core.contrib.django"

_DRIVERS: dict[str, tuple[tuple[str, str], ...]] = {
    # Django ENGINE suffix -> (importable DBAPI module, SQLAlchemy drivername) in preference order
    "postgresql": (("psycopg", "postgresql+psycopg"), ("psycopg2", "postgresql+psycopg2")),
    "postgis": (("psycopg", "postgresql+psycopg"), ("psycopg2", "postgresql+psycopg2")),
    "mysql": (("pymysql", "mysql+pymysql"), ("MySQLdb", "mysql+mysqldb")),
}


def _engine_kind(engine: str) -> str:
    return engine.rsplit(".", 1)[-1]


def database_url(settings_dict: Mapping[str, Any], alias: str = "default") -> str:
    """The SQLAlchemy URL of a Django database (an entry of ``DATABASES`` or a connection's
    ``settings_dict``). SQLite uses ``NAME`` as the file; PostgreSQL and MySQL/MariaDB use
    ``USER``, ``PASSWORD``, ``HOST``, ``PORT``, ``NAME`` and the string values of ``OPTIONS``.
    ``ConfigurationError`` (key ``store.url``) for an engine Ratchet cannot share, naming the
    alias and telling to set ``RATCHET["store"]["url"]``."""
    engine = str(settings_dict.get("ENGINE", ""))
    kind = _engine_kind(engine)
    name = settings_dict.get("NAME")
    if kind in ("sqlite3", "spatialite"):
        database = str(name) if name else ""
        if not database or database == ":memory:" or "mode=memory" in database:
            raise ConfigurationError(
                "store.url",
                f"DATABASES[{alias!r}] is an in-memory SQLite database, which a worker process "
                "cannot share; use a file (NAME = BASE_DIR / 'db.sqlite3'; in tests "
                "TEST = {'NAME': ...}) or set RATCHET['store']['url']",
            )
        return sa.URL.create("sqlite", database=database).render_as_string(hide_password=False)
    candidates = _DRIVERS.get(kind)
    if candidates is None:
        raise ConfigurationError(
            "store.url",
            f"DATABASES[{alias!r}] uses ENGINE {engine!r}, which Ratchet cannot derive a store "
            "from; set RATCHET['store']['url'] (sqlite, postgresql, mysql/mariadb or mongodb)",
        )
    drivername = next(
        (driver for module, driver in candidates if importlib.util.find_spec(module)),
        candidates[0][1],
    )
    port = settings_dict.get("PORT")
    options = settings_dict.get("OPTIONS") or {}
    query = {
        str(k): str(v)
        for k, v in options.items()
        if isinstance(v, (str, int)) and not isinstance(v, bool)
    }
    url = sa.URL.create(
        drivername,
        username=settings_dict.get("USER") or None,
        password=settings_dict.get("PASSWORD") or None,
        host=settings_dict.get("HOST") or None,
        port=int(port) if port not in (None, "") else None,
        database=str(name) if name else None,
        query=query,
    )
    return url.render_as_string(hide_password=False)


class DjangoSettingsSource:
    """``settings.RATCHET`` (nested or dotted keys) as a ``RatchetConfigSource``. Read on every
    lookup, so ``override_settings`` in tests is seen by a rebuilt container."""

    description = "Django settings.RATCHET"

    def __init__(self, values: Mapping[str, Any]) -> None:
        from ratchet_core.contrib import flatten_settings

        self._values = flatten_settings(values, SETTING)
        allowed = self._values.get("security.allowed_packages")
        if allowed is not None:
            # The tasks backend's own job target must pass the ClassPolicy like any other.
            items = [allowed] if isinstance(allowed, str) else list(allowed)
            if CONTRIB_PACKAGE not in items and "*" not in items:
                self._values["security.allowed_packages"] = [*items, CONTRIB_PACKAGE]

    @property
    def values(self) -> dict[str, Any]:
        return dict(self._values)

    def get(self, property_name: str, environment_variable: str) -> str | None:
        value = self._values.get(property_name)
        return None if value is None else _to_raw(value)


class DjangoDatabaseSource:
    """The lowest-precedence source: ``store.url`` from the Django database the store follows,
    and the tasks backend's target package in ``security.allowed_packages``."""

    def __init__(self, alias: str, url: str | None, error: ConfigurationError | None) -> None:
        self.alias = alias
        self.url = url
        self.error = error

    @property
    def description(self) -> str:
        return f"Django DATABASES[{self.alias!r}]"

    def get(self, property_name: str, environment_variable: str) -> str | None:
        if property_name == "store.url":
            if self.error is not None:
                raise self.error
            return self.url
        if property_name == "security.allowed_packages":
            return CONTRIB_PACKAGE
        return None


def ratchet_settings() -> dict[str, Any]:
    """``settings.RATCHET`` (an empty dict when absent); ``ConfigurationError`` if it is not a
    dict."""
    from django.conf import settings

    value = getattr(settings, SETTING, None)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            SETTING, f"settings.RATCHET must be a dict, got {type(value).__name__}"
        )
    return dict(value)


__all__ = [
    "CONTAINER_SETTING",
    "DATABASE",
    "MIGRATE_WITH_DJANGO",
    "SETTING",
    "DjangoDatabaseSource",
    "DjangoSettingsSource",
    "database_url",
    "ratchet_settings",
]
