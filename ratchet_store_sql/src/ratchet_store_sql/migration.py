"""Schema migrations (Alembic scripts shipped inside the package) run programmatically.

Alembic (and Mako, which it loads) is imported only to migrate: a worker checking at start-up
that the schema is current reads the version table with one query and finds the newest shipped
revision by reading the scripts' ``revision`` / ``down_revision`` lines, so its process never
loads Alembic (a test checks both answers against Alembic's own).
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from ratchet_api.errors import StoreError
from ratchet_store_sql._engine import create_store_engine
from ratchet_store_sql._errors import translate
from ratchet_store_sql.schema import VERSION_TABLE

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def _assigned(tree: ast.Module, name: str) -> str | None:
    target: ast.expr
    value: ast.expr | None
    for node in tree.body:
        if isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == name and value is not None:
            literal = ast.literal_eval(value)
            return literal if isinstance(literal, str) else None
    return None


_REVISION_LINE = re.compile(r"^(?:down_)?revision\b.*$", re.MULTILINE)


def _revision_statements(text: str) -> ast.Module:
    """The module-level ``revision`` / ``down_revision`` statements of a script: its lines
    starting with those names parsed alone (a worker's start-up check reads every script), or
    the whole script when they do not parse alone (an assignment over several lines)."""
    try:
        return ast.parse("\n".join(_REVISION_LINE.findall(text)))
    except SyntaxError:
        return ast.parse(text)


@cache
def shipped_head_revision() -> str:
    """The newest revision of the scripts in ``migrations/versions`` (the one no other script
    revises), read from their ``revision`` / ``down_revision`` assignments without Alembic."""
    revisions: set[str] = set()
    revised: set[str] = set()
    for script in sorted((MIGRATIONS_DIR / "versions").glob("*.py")):
        tree = _revision_statements(script.read_text(encoding="utf-8"))
        revision = _assigned(tree, "revision")
        if revision is None:
            continue
        revisions.add(revision)
        down = _assigned(tree, "down_revision")
        if down is not None:
            revised.add(down)
    heads = revisions - revised
    if len(heads) != 1:
        raise RuntimeError(f"the shipped migrations must have exactly one head, found {heads}")
    return heads.pop()


def alembic_config(connection: sa.Connection | None = None) -> Config:
    """An Alembic ``Config`` for the store's scripts, bound to ``connection`` when given."""
    from alembic.config import Config

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
        from alembic import command

        self._run(lambda cfg: command.upgrade(cfg, revision))

    def downgrade(self, revision: str) -> None:
        """Migrate down to ``revision``; ``"base"`` drops every Ratchet table."""
        from alembic import command

        self._run(lambda cfg: command.downgrade(cfg, revision))

    def current_revision(self) -> str | None:
        """The applied revision, or None when the database has no Ratchet schema."""
        try:
            with self._engine.connect() as conn:
                if not sa.inspect(conn).has_table(VERSION_TABLE):
                    return None
                table = sa.table(VERSION_TABLE, sa.column("version_num", sa.String()))
                rows = conn.execute(sa.select(table.c.version_num)).scalars().all()
        except sa.exc.SQLAlchemyError as exc:
            raise translate(exc, f"reading the schema revision of {self._where()}") from exc
        if len(rows) > 1:
            raise StoreError(
                f"{self._where()} has several Ratchet schema heads {sorted(rows)}; "
                "run `ratchet db upgrade`"
            )
        return rows[0] if rows else None

    def head_revision(self) -> str | None:
        """The newest revision shipped with this version of the package."""
        return shipped_head_revision()

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


__all__ = [
    "MIGRATIONS_DIR",
    "SqlSchemaManager",
    "alembic_config",
    "migrate",
    "shipped_head_revision",
]
