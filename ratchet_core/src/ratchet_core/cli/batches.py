"""``ratchet batches list|show``: batches and their progress."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

import click
from rich.table import Table

from ratchet_api.store.entities import BatchEntity, BatchStatus
from ratchet_core.cli import get_container
from ratchet_core.cli.db import apply_url, console, ratchet_errors, url_option
from ratchet_core.cli.safe import shown
from ratchet_core.features.batches import require_batch_store


def _batch_dict(batch: BatchEntity) -> dict[str, Any]:
    return {
        "id": str(batch.id),
        "name": batch.name,
        "status": batch.status.value,
        "total": batch.total,
        "succeeded": batch.succeeded,
        "failed": batch.failed,
        "pending": batch.pending,
        "parent_job_id": str(batch.parent_job_id) if batch.parent_job_id else None,
        "created_at": batch.created_at.isoformat(),
        "completed_at": batch.completed_at.isoformat() if batch.completed_at else None,
        "last_error": batch.last_error,
    }


def _store(store_url: str | None) -> Any:
    apply_url(store_url)
    with ratchet_errors():
        return require_batch_store(get_container().job_store(), "ratchet batches")


def _table(batches: list[BatchEntity]) -> Table:
    table = Table(title=f"{len(batches)} batch(es)")
    for column in ("id", "name", "status", "total", "succeeded", "failed", "pending", "error"):
        table.add_column(column, overflow="fold")
    for b in batches:
        table.add_row(
            str(b.id),
            shown(b.name),  # stored data printed verbatim (cli/safe.py)
            b.status.value,
            str(b.total),
            str(b.succeeded),
            str(b.failed),
            str(b.pending),
            shown(b.last_error or ""),
        )
    return table


@click.group("batches")
def batches_group() -> None:
    """List and show batches (progress counted by the store)."""


@batches_group.command("list")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice([s.value for s in BatchStatus], case_sensitive=False),
    help="Only batches in this status (repeatable).",
)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines instead of a table.")
@url_option
def list_batches(
    statuses: tuple[str, ...], limit: int, as_json: bool, store_url: str | None
) -> None:
    """List batches, newest first."""
    store = _store(store_url)
    wanted = frozenset(BatchStatus(s.upper()) for s in statuses) or None
    with ratchet_errors():
        batches = store.find_batches(statuses=wanted, limit=limit)
    if as_json:
        for batch in batches:
            click.echo(json.dumps(_batch_dict(batch)))
        return
    if not batches:
        console().print("no batches match")
        return
    console().print(_table(batches))


@batches_group.command("show")
@click.argument("batch_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@url_option
def show_batch(batch_id: str, as_json: bool, store_url: str | None) -> None:
    """Show one batch's progress (its children: ``ratchet jobs list --batch ID``)."""
    try:
        ident = UUID(batch_id.strip())
    except ValueError:
        raise click.BadParameter(
            f"{batch_id!r} is not a batch id (a UUID)", param_hint="BATCH_ID"
        ) from None
    store = _store(store_url)
    with ratchet_errors():
        batch = store.find_batch(ident)
    if batch is None:
        raise click.ClickException(f"no batch {ident}")
    if as_json:
        click.echo(json.dumps(_batch_dict(batch), indent=2))
        return
    console().print(_table([batch]))


def register(group: click.Group) -> None:
    group.add_command(batches_group)
