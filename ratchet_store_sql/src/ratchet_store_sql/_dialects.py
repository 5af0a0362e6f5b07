"""The few statements that differ per database: the clock, upserts, insert-or-ignore,
durations. Everything else is portable SQLAlchemy Core."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql
from sqlalchemy.dialects import sqlite as sqlite_dialect

from ratchet_store_sql._types import UtcDateTime

_UTC = UtcDateTime()


class Dialect:
    """What the store needs to know about one backend."""

    def __init__(self, name: str) -> None:
        self.name = "mysql" if name == "mariadb" else name
        self.is_pg = self.name == "postgresql"
        self.is_mysql = self.name == "mysql"
        self.is_sqlite = self.name == "sqlite"
        self.returning = self.is_pg or (self.is_sqlite and sqlite3.sqlite_version_info >= (3, 35))

    def unindexed(self, column: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
        """A text ``column`` in a form no index serves, for the other conditions of a write
        that names its jobs by id (the fence's ``status = 'RUNNING'``, ``owner = node``).

        On PostgreSQL this is ``column || ''``: every job that runs leaves dead entries under
        'RUNNING' (and under its node) in the status and owner indexes until the next vacuum;
        the planner does not count them, and when it took one of those indexes for a fenced
        write (a close call against the primary key, both estimated at one row) the write
        read tens of thousands of dead entries (measured: 33,600 per started mark in a
        10,000-job run). With these columns out of the index conditions, the primary key is
        the only way in. Other backends: the column itself."""
        if self.is_pg:
            return sa.type_coerce(column.op("||")(sa.literal("")), sa.String())
        return column

    def now(self) -> sa.ColumnElement[datetime]:
        """The database clock as naive UTC with the finest precision it has."""
        return self.now_plus(0.0)

    def now_plus(self, seconds: float) -> sa.ColumnElement[datetime]:
        """The database clock shifted by ``seconds`` (negative: in the past)."""
        expr: sa.ColumnElement[Any]
        if self.is_pg:
            expr = sa.func.timezone("UTC", sa.func.statement_timestamp())
            if seconds:
                expr = expr + sa.func.make_interval(0, 0, 0, 0, 0, 0, sa.literal(seconds))
        elif self.is_mysql:
            expr = sa.func.utc_timestamp(6)
            if seconds:
                expr = sa.func.timestampadd(
                    sa.text("MICROSECOND"), round(seconds * 1_000_000), expr
                )
        else:
            # SQLite is embedded: "now" is read by the SQLite library in the statement itself
            # (the host's clock as the C library sees it, millisecond precision), never by the
            # application's Python clock. Every process on the host thus uses one time source
            # for leases, heartbeats and due times, as the server clock does elsewhere. The
            # text has the column format (YYYY-MM-DD HH:MM:SS.ffffff) so comparisons hold.
            modifier = f"{seconds:+.6f} seconds"
            expr = sa.func.strftime("%Y-%m-%d %H:%M:%f", "now", modifier).concat("000")
        return sa.type_coerce(expr, _UTC)

    def seconds_between(
        self, start: sa.ColumnElement[Any], end: sa.ColumnElement[Any]
    ) -> sa.ColumnElement[float]:
        """``end - start`` in seconds (float)."""
        expr: sa.ColumnElement[Any]
        if self.is_pg:
            expr = sa.func.extract("epoch", end - start)
        elif self.is_mysql:
            expr = sa.func.timestampdiff(sa.text("MICROSECOND"), start, end) / 1_000_000.0
        else:
            expr = (sa.func.julianday(end) - sa.func.julianday(start)) * 86400.0
        return sa.type_coerce(expr, sa.Float())

    def insert_ignore(self, table: sa.Table) -> Any:
        """INSERT that silently skips rows colliding with a primary or unique key."""
        if self.is_pg:
            return postgresql.insert(table).on_conflict_do_nothing()
        if self.is_sqlite:
            return sqlite_dialect.insert(table).on_conflict_do_nothing()
        return mysql.insert(table).prefix_with("IGNORE")

    def insert_ignored_count(self, conn: sa.Connection, stmt: Any, table: sa.Table) -> int:
        """Execute an ``insert_ignore`` statement; the number of rows it really inserted.
        (psycopg reports no rowcount for INSERT through SQLAlchemy 2.1: use RETURNING.)"""
        if self.returning:
            return len(conn.execute(stmt.returning(*table.primary_key.columns)).all())
        return int(conn.execute(stmt).rowcount)

    def upsert(
        self,
        table: sa.Table,
        values: Mapping[str, Any],
        keys: Sequence[str],
        update: Mapping[str, Any],
    ) -> Any:
        """INSERT ``values``; on a key collision apply ``update`` instead."""
        if self.is_pg:
            pg = postgresql.insert(table).values(**values)
            return pg.on_conflict_do_update(index_elements=list(keys), set_=dict(update))
        if self.is_sqlite:
            lite = sqlite_dialect.insert(table).values(**values)
            return lite.on_conflict_do_update(index_elements=list(keys), set_=dict(update))
        my = mysql.insert(table).values(**values)
        return my.on_duplicate_key_update(**update)

    def upsert_many(self, table: sa.Table, keys: Sequence[str], columns: Sequence[str]) -> Any:
        """INSERT for executemany (one parameter dict per row); on a key collision the row's
        ``columns`` overwrite the stored ones."""
        if self.is_pg:
            pg = postgresql.insert(table)
            return pg.on_conflict_do_update(
                index_elements=list(keys), set_={c: pg.excluded[c] for c in columns}
            )
        if self.is_sqlite:
            lite = sqlite_dialect.insert(table)
            return lite.on_conflict_do_update(
                index_elements=list(keys), set_={c: lite.excluded[c] for c in columns}
            )
        my = mysql.insert(table)
        return my.on_duplicate_key_update({c: my.inserted[c] for c in columns})


__all__ = ["Dialect"]
