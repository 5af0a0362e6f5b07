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


def key_string(length: int) -> sa.types.TypeEngine[str]:
    """``VARCHAR(length)`` compared byte-wise on MySQL/MariaDB (whose default collations are
    case-insensitive: tags, keys and names must stay distinct by case). The MySQL variant is
    the generic ``String`` with a collation, which MySQL's compiler renders as
    ``VARCHAR(length) COLLATE utf8mb4_bin``."""
    return sa.String(length).with_variant(sa.String(length, collation="utf8mb4_bin"), *_MYSQL)


def long_text() -> sa.types.TypeEngine[str]:
    """``TEXT`` (``LONGTEXT`` on MySQL/MariaDB)."""
    return sa.Text().with_variant(MySqlLongText(), *_MYSQL)


__all__ = ["MySqlLongText", "UtcDateTime", "key_string", "long_text"]
