"""The backends of the SQL store, one module each behind one interface (``Dialect``).

``dialect_for(engine)`` imports only the module of the engine's backend: a store on SQLite
never loads SQLAlchemy's PostgreSQL or MySQL dialects, nor their drivers.
"""

from __future__ import annotations

from importlib import import_module

import sqlalchemy as sa

from ratchet_api.errors import StoreError
from ratchet_store_sql._dialects.base import Dialect

_BACKENDS = {
    ("sqlite", None): ("sqlite", "SqliteDialect"),
    ("postgresql", "psycopg"): ("postgresql", "PsycopgDialect"),
    ("postgresql", None): ("postgresql", "PostgresDialect"),
    ("mysql", None): ("mysql", "MysqlDialect"),
    ("mariadb", None): ("mysql", "MysqlDialect"),
}


def dialect_for(engine: sa.Engine, *, load_tags_on_claim: bool = True) -> Dialect:
    """The ``Dialect`` of ``engine``'s backend (and driver, where the store has a faster path
    for it), chosen once when the store is built."""
    name, driver = engine.dialect.name, engine.dialect.driver
    found = _BACKENDS.get((name, driver)) or _BACKENDS.get((name, None))
    if found is None:
        raise StoreError(
            f"SqlJobStore runs on SQLite, PostgreSQL and MySQL/MariaDB, not on {name!r}"
        )
    module, cls = found
    kind: type[Dialect] = getattr(import_module(f"ratchet_store_sql._dialects.{module}"), cls)
    return kind(engine, load_tags_on_claim=load_tags_on_claim)


__all__ = ["Dialect", "dialect_for"]
