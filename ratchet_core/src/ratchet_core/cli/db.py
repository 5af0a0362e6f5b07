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


def job_store(store_url: str | None) -> JobStore:
    apply_url(store_url)
    with ratchet_errors():
        store: JobStore = get_container().job_store()
    return store


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


def schema_manager(store: JobStore) -> SchemaManager:
    manager = store.capability(SchemaManager)
    if manager is None:
        raise click.ClickException(f"{type(store).__name__} has no schema to manage")
    return manager


@click.group("db")
def db_group() -> None:
    """Create, migrate and inspect the store's schema."""


@db_group.command("upgrade")
@click.option("--revision", default="head", show_default=True, help="Target revision.")
@url_option
def upgrade(revision: str, store_url: str | None) -> None:
    """Migrate the schema up to REVISION (creates the tables on an empty database)."""
    store = job_store(store_url)
    try:
        with ratchet_errors():
            manager = schema_manager(store)
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
            revision = schema_manager(store).current_revision()
    finally:
        store.close()
    click.echo(revision or "none")


def register(group: click.Group) -> None:
    group.add_command(db_group)
