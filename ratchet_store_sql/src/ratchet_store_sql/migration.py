"""Schema migrations (Alembic scripts shipped inside the package) run programmatically."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from ratchet_store_sql._engine import create_store_engine
from ratchet_store_sql._errors import translate
from ratchet_store_sql.schema import VERSION_TABLE

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def alembic_config(connection: sa.Connection | None = None) -> Config:
    """An Alembic ``Config`` for the store's scripts, bound to ``connection`` when given."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("version_table", VERSION_TABLE)
    if connection is not None:
        config.attributes["connection"] = connection
    return config


class SqlSchemaManager:
    """Upgrades, downgrades and reports the Ratchet schema of one database.

    Implements ``ratchet_api.store.SchemaManager``; every call runs in its own transaction.
    Driver errors (a database that does not exist, an unreachable server, a file that cannot be
    opened) are raised as ``StoreError``/``TransientStoreError``, as by the store's other methods.
    """

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    def upgrade(self, revision: str = "head") -> None:
        """Migrate up to ``revision`` (default: the newest). Idempotent."""
        self._run(lambda cfg: command.upgrade(cfg, revision))

    def downgrade(self, revision: str) -> None:
        """Migrate down to ``revision``; ``"base"`` drops every Ratchet table."""
        self._run(lambda cfg: command.downgrade(cfg, revision))

    def current_revision(self) -> str | None:
        """The applied revision, or None when the database has no Ratchet schema."""
        try:
            with self._engine.connect() as conn:
                context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
                return context.get_current_revision()
        except sa.exc.SQLAlchemyError as exc:
            raise translate(exc, f"reading the schema revision of {self._where()}") from exc

    def head_revision(self) -> str | None:
        """The newest revision shipped with this version of the package."""
        return ScriptDirectory.from_config(alembic_config()).get_current_head()

    def _where(self) -> str:
        return self._engine.url.render_as_string(hide_password=True)

    def _run(self, action: object) -> None:
        assert callable(action)
        try:
            with self._engine.begin() as conn:
                action(alembic_config(conn))
        except sa.exc.SQLAlchemyError as exc:
            raise translate(exc, f"migrating the schema of {self._where()}") from exc


def migrate(url_or_engine: str | sa.Engine, revision: str = "head") -> None:
    """Upgrade the Ratchet schema of the database at ``url_or_engine`` to ``revision``.

    The Python form of ``ratchet db upgrade``. A URL opens (and disposes) its own engine.
    """
    if isinstance(url_or_engine, sa.Engine):
        SqlSchemaManager(url_or_engine).upgrade(revision)
        return
    engine = create_store_engine(url_or_engine)
    try:
        SqlSchemaManager(engine).upgrade(revision)
    finally:
        engine.dispose()


__all__ = ["MIGRATIONS_DIR", "SqlSchemaManager", "alembic_config", "migrate"]
