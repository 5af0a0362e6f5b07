"""``ratchet db upgrade|downgrade|current``: the store's schema migrations.

Also holds the small helpers the other command modules share: ``--url`` handling and turning
Ratchet errors into clean CLI errors (exit code 1).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar
from uuid import UUID

import click

from ratchet_api.errors import RatchetError
from ratchet_api.store.protocols import JobStore, SchemaManager
from ratchet_core.cli import CliState, get_container

if TYPE_CHECKING:
    from rich.console import Console

F = TypeVar("F", bound=Callable[..., Any])


def url_option(fn: F) -> F:
    """``--url``: the store URL for this command (overrides store.url)."""
    return click.option(
        "--url",
        "store_url",
        metavar="URL",
        default=None,
        help="Store URL (default: store.url from --set, RATCHET_STORE_URL or ratchet.toml, "
        "else sqlite:///ratchet.db).",
    )(fn)


def apply_url(store_url: str | None) -> None:
    """Make ``--url`` the ``store.url`` of the container this command builds."""
    if store_url:
        ctx = click.get_current_context()
        root = ctx.find_root()
        if not isinstance(root.obj, CliState):
            root.obj = CliState()
        root.obj.settings["store.url"] = store_url


def job_store(store_url: str | None, *, create: bool = False) -> JobStore:
    """The store of this invocation. Unless ``create``, a SQLite file that does not exist is a
    clear error (naming the URL and where it came from) instead of a new empty database."""
    apply_url(store_url)
    with ratchet_errors():
        container = get_container()
        if not create:
            require_existing_database(container)
        store: JobStore = container.job_store()
    return store


def store_origin(container: Any) -> str:
    """``<url> (store.url from <source>)``, password hidden: which store a command uses and
    which configuration source chose it (``default`` when none set it)."""
    from ratchet_core.runtime.config import STORE_URL
    from ratchet_core.runtime.stores import redact_url

    settings = container.settings()
    return f"{redact_url(settings.get(STORE_URL))} (store.url from {settings.source_of(STORE_URL)})"


def sqlite_file(url: str) -> str | None:
    """The file of a SQLite store URL (None for other stores, in-memory and ``file:`` URIs)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.split("+", 1)[0].lower() != "sqlite":
        return None
    path = rest.partition("?")[0]
    if not path.startswith("/"):
        return None  # sqlite:// (memory) or a host part SQLite does not have
    path = path[1:]  # sqlite:///relative.db -> relative.db; sqlite:////abs -> /abs
    if not path or path == ":memory:" or path.startswith("file:"):
        return None
    return path


def require_existing_database(container: Any) -> None:
    """Refuse (``click.ClickException``) to work on a SQLite file that does not exist: opening
    it would create an empty database in the wrong place (the usual cause: the store URL did
    not come from where the user thinks)."""
    import os

    from ratchet_core.runtime.config import STORE_URL

    if container.job_store.overridden:
        return  # the application supplies its store: store.url does not choose it
    path = sqlite_file(container.settings().get(STORE_URL))
    if path is None or os.path.exists(path):
        return
    raise click.ClickException(
        f"no Ratchet database at {os.path.abspath(path)}: the store is "
        f"{store_origin(container)}. Point --url, --set store.url=..., RATCHET_STORE_URL or "
        "ratchet.toml at your store (inside Flask or Django, use `flask ratchet ...` or "
        "`manage.py ratchet_...`), or run `ratchet db upgrade` to create this one"
    )


@contextlib.contextmanager
def ratchet_errors() -> Iterator[None]:
    """Report a ``RatchetError`` as ``Error: <message>`` with exit code 1."""
    try:
        yield
    except RatchetError as exc:
        raise click.ClickException(str(exc)) from exc


def parse_job_id(value: str) -> UUID:
    try:
        return UUID(value.strip())
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not a job id (a UUID)", param_hint="JOB_ID"
        ) from None


def console() -> Console:
    """A rich console; wide enough for ids and targets when the output is not a terminal."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=200)


def schema_manager(store: JobStore) -> SchemaManager | None:
    """The store's ``SchemaManager``; None (after saying so) for a store that manages no
    schema: there is nothing to migrate, which is not an error."""
    manager = store.capability(SchemaManager)
    if manager is None:
        click.echo(f"{type(store).__name__} manages no schema: nothing to migrate")
    return manager


@click.group("db")
def db_group() -> None:
    """Create, migrate and inspect the store's schema."""


@db_group.command("upgrade")
@click.option("--revision", default="head", show_default=True, help="Target revision.")
@url_option
def upgrade(revision: str, store_url: str | None) -> None:
    """Migrate the schema up to REVISION (creates the tables on an empty database)."""
    store = job_store(store_url, create=True)
    click.echo(f"store: {store_origin(get_container())}")
    try:
        with ratchet_errors():
            manager = schema_manager(store)
            if manager is None:
                return
            before = manager.current_revision()
            manager.upgrade(revision)
            after = manager.current_revision()
    finally:
        store.close()
    if before == after:
        click.echo(f"schema already at revision {after}")
    else:
        click.echo(f"schema upgraded from {before or 'empty'} to {after}")


@db_group.command("downgrade")
@click.argument("revision")
@url_option
def downgrade(revision: str, store_url: str | None) -> None:
    """Migrate the schema down to REVISION ("base" removes every Ratchet table)."""
    store = job_store(store_url)
    try:
        with ratchet_errors():
            manager = schema_manager(store)
            if manager is None:
                return
            manager.downgrade(revision)
            after = manager.current_revision()
    finally:
        store.close()
    click.echo(f"schema downgraded to {after or 'base (no Ratchet tables)'}")


@db_group.command("current")
@url_option
def current(store_url: str | None) -> None:
    """Print the applied schema revision ("none" for an empty database)."""
    store = job_store(store_url)
    try:
        with ratchet_errors():
            manager = schema_manager(store)
            if manager is None:
                return
            revision = manager.current_revision()
    finally:
        store.close()
    click.echo(revision or "none")


def register(group: click.Group) -> None:
    group.add_command(db_group)
