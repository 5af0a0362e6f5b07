"""``ratchet spi``: every SPI with its active implementation, priority and origin."""

from __future__ import annotations

import json

import attrs
import click

from ratchet_core.cli import get_container


@click.command("spi")
@click.option("--json", "as_json", is_flag=True, help="Print JSON records instead of a table.")
def spi_command(as_json: bool) -> None:
    """List every SPI with its active implementation, priority and origin.

    Origin is `default`, `explicit` (registered in code), `decorator module <module>`
    (alternatives.modules) or `entry point <distribution>`.
    """
    rows = get_container().describe_spis()
    if as_json:
        click.echo(json.dumps([attrs.asdict(r) for r in rows], indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Ratchet SPIs")
    for column in ("SPI", "provider", "implementation", "priority", "origin", "scope"):
        table.add_column(column, overflow="fold")
    for row in rows:
        style = None if row.origin == "default" else "bold green"
        table.add_row(
            row.spi,
            row.provider,
            row.implementation,
            str(row.priority),
            row.origin,
            row.scope,
            style=style,
        )
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)
    console.print(table)


def register(group: click.Group) -> None:
    group.add_command(spi_command)
