"""Column types shared by the schema and the baseline migration.

Datetimes are stored timezone-naive in UTC with microseconds (``DATETIME(6)`` on MySQL/MariaDB)
and come back aware UTC. Long text is ``LONGTEXT`` on MySQL/MariaDB, whose ``TEXT`` stops at 64 KiB.

The MySQL/MariaDB types are named here without importing ``sqlalchemy.dialects.mysql`` (the
whole dialect package, drivers included): a worker on SQLite or PostgreSQL never loads it. Their
variants resolve to the MySQL types when a MySQL/MariaDB dialect compiles or binds them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from ratchet_api.errors import StoreDataError

_MYSQL = ("mysql", "mariadb")


class UtcDateTime(sa.TypeDecorator[datetime]):
    """Aware UTC in Python, naive UTC in the database. Naive or non-UTC values are refused."""

    impl = sa.DateTime(timezone=False)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name in _MYSQL:
            from sqlalchemy.dialects import mysql  # loaded already: a MySQL dialect is running

            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(sa.DateTime(timezone=False))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise StoreDataError("datetime", f"expected a datetime, got {type(value).__name__}")
        if value.tzinfo is None or value.utcoffset() != timedelta(0):
            raise StoreDataError(
                "datetime", f"must be a timezone-aware UTC datetime, got {value!r}"
            )
        return value.replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):  # a raw SQLite clock expression without a type
            value = datetime.fromisoformat(value)
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)  # type: ignore[no-any-return]
        return value.astimezone(UTC)  # type: ignore[no-any-return]


class MySqlLongText(sa.TypeDecorator[str]):
    """MySQL's ``LONGTEXT``, the MySQL/MariaDB variant of :func:`long_text` (its class is looked
    up only by a MySQL/MariaDB dialect)."""

    impl = sa.Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        from sqlalchemy.dialects import mysql  # loaded already: a MySQL dialect is running

        return dialect.type_descriptor(mysql.LONGTEXT())


NO_PAD_COLLATIONS = {"mariadb": "utf8mb4_nopad_bin", "mysql": "utf8mb4_0900_bin"}
"""The byte-wise, NO PAD collation of a key column, by server (MySQL 8.0.17's
``utf8mb4_0900_bin``; MariaDB 10.2's ``utf8mb4_nopad_bin``)."""

LEGACY_KEY_COLLATION = "utf8mb4_bin"
"""A MySQL before 8.0.17 has no NO PAD binary collation: keys still compare by case there, but
``'a'`` and ``'a '`` are one key (docs/stores/mysql.md)."""


def key_collation(dialect: Dialect) -> str:
    """The collation of a key column on this MySQL or MariaDB server: byte-wise (keys, tags and
    names stay distinct by case and accent) and NO PAD (a trailing space is part of the key:
    ``utf8mb4_bin`` is PAD SPACE, so under it the idempotency keys ``'a'`` and ``'a '`` would be
    duplicates and one job silently not enqueued)."""
    if getattr(dialect, "is_mariadb", False):
        return NO_PAD_COLLATIONS["mariadb"]
    version = dialect.server_version_info or ()
    return NO_PAD_COLLATIONS["mysql"] if version >= (8, 0, 17) else LEGACY_KEY_COLLATION


class MySqlKeyString(sa.TypeDecorator[str]):
    """The MySQL/MariaDB variant of :func:`key_string`: ``VARCHAR(length) COLLATE`` the
    server's :func:`key_collation`, chosen when a MySQL dialect compiles it (DDL, Alembic)."""

    impl = sa.String
    cache_ok = True

    def __init__(self, length: int) -> None:
        super().__init__(length)
        self.length = length

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        collated = sa.String(self.length, collation=key_collation(dialect))
        return dialect.type_descriptor(collated)


def key_string(length: int) -> sa.types.TypeEngine[str]:
    """``VARCHAR(length)`` compared byte by byte, trailing spaces included, on every backend.
    PostgreSQL and SQLite compare text that way already; MySQL/MariaDB's default collations are
    case-insensitive and pad with spaces, so their variant names its collation
    (:class:`MySqlKeyString`): tags, keys, names and targets stay distinct whatever the
    database's default collation is."""
    return sa.String(length).with_variant(MySqlKeyString(length), *_MYSQL)


def long_text() -> sa.types.TypeEngine[str]:
    """``TEXT`` (``LONGTEXT`` on MySQL/MariaDB)."""
    return sa.Text().with_variant(MySqlLongText(), *_MYSQL)


__all__ = [
    "LEGACY_KEY_COLLATION",
    "NO_PAD_COLLATIONS",
    "MySqlKeyString",
    "MySqlLongText",
    "UtcDateTime",
    "key_collation",
    "key_string",
    "long_text",
]
