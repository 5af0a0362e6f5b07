"""Ratchet's SQL store: SQLAlchemy Core on SQLite, PostgreSQL and MySQL/MariaDB.

``SqlJobStore(url_or_engine)`` is the store; ``migrate(url_or_engine)`` upgrades the schema
(the Python form of ``ratchet db upgrade``).
"""

from ratchet_store_sql._engine import create_store_engine
from ratchet_store_sql.migration import SqlSchemaManager, migrate
from ratchet_store_sql.schema import metadata
from ratchet_store_sql.store import SqlJobStore

__all__ = ["SqlJobStore", "SqlSchemaManager", "create_store_engine", "metadata", "migrate"]
