"""``ratchet config``: every configuration key in effect, its value and where it came from
(explicit overrides / ``--set``, an environment variable, a TOML file such as a ``ratchet.toml``
found in the working directory, or the default). Secrets are never printed."""

from __future__ import annotations

import json
import re
from typing import Any

import click

from ratchet_core.cli import get_container
from ratchet_core.cli.db import console, ratchet_errors
from ratchet_core.cli.safe import shown
from ratchet_core.defaults.security import ALLOW_ALL_WARNING, allows_everything, redact
from ratchet_core.runtime.config import KEYS, DefaultRatchetConfig, import_key_modules

_SECRET_NAME = re.compile(r"key|secret|password|token|credential", re.IGNORECASE)


def _display(name: str, raw: str) -> str:
    """What may be printed of a value: nothing of a secret-named key, no userinfo of a URL."""
    if _SECRET_NAME.search(name.rsplit(".", 1)[-1]):
        return "(set; not shown)"
    return redact(raw, 4000)


@click.command("config")
@click.option("--all", "show_all", is_flag=True, help="Also list keys left at their default.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON records instead of a table.")
def config_command(show_all: bool, as_json: bool) -> None:
    """Show each configuration key that is set, its value and its source (with --all, every
    key). Unknown keys are refused before anything is shown."""
    with ratchet_errors():
        container = get_container()  # building it refuses unknown keys, naming the closest
        settings = container.settings()
    import_key_modules()
    rows: list[dict[str, Any]] = []
    for name, key in sorted(KEYS.items()):
        if isinstance(settings, DefaultRatchetConfig):
            source = settings.source_of(key)
            raw = settings.raw(key)
        else:
            source, raw = type(settings).__name__, None
        if raw is None and not show_all:
            continue
        value = _display(name, raw) if raw is not None else f"{key.default!r} (default)"
        rows.append({"key": name, "value": value, "source": source})
    files = [
        str(getattr(s, "path", ""))
        for s in getattr(settings, "sources", ())
        if getattr(s, "path", None)
    ]
    warnings = [ALLOW_ALL_WARNING] if allows_everything(settings) else []
    if as_json:
        click.echo(json.dumps({"files": files, "keys": rows, "warnings": warnings}, indent=2))
        return
    out = console()
    out.print(shown(f"configuration files: {', '.join(files) or 'none'}"))
    from rich.table import Table

    table = Table(title=f"{len(rows)} key(s)" + ("" if show_all else " set"))
    for column in ("key", "value", "source"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(shown(row["key"]), shown(row["value"]), shown(row["source"]))
    out.print(table)
    for warning in warnings:
        click.secho(f"warning: {warning}", err=True, fg="yellow", bold=True)


def register(group: click.Group) -> None:
    group.add_command(config_command)
