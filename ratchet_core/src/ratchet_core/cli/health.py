"""``ratchet health``: exit 0 when the store answers, its schema is current and enough nodes
heartbeat; 1 otherwise (for container probes and monitoring)."""

from __future__ import annotations

import json

import click

from ratchet_core.cli import get_container
from ratchet_core.cli.db import apply_url, ratchet_errors, url_option
from ratchet_core.defaults.security import ALLOW_ALL_WARNING, allows_everything
from ratchet_core.observability.health import check_health
from ratchet_core.worker.settings import WORKER_NODE_TIMEOUT


@click.command("health")
@click.option(
    "--min-nodes",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="Fail unless at least this many worker nodes heartbeat.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@url_option
def health(min_nodes: int, as_json: bool, store_url: str | None) -> None:
    """Check the store, its schema and the worker nodes; exit code 1 when a check fails."""
    apply_url(store_url)
    with ratchet_errors():
        container = get_container()
        report = check_health(
            container.job_store(),
            node_timeout=container.settings().get(WORKER_NODE_TIMEOUT),
            min_nodes=min_nodes,
        )
    warnings = [ALLOW_ALL_WARNING] if allows_everything(container.settings()) else []
    if as_json:
        click.echo(json.dumps({**report.as_dict(), "warnings": warnings}))
    else:
        for check in report.checks:
            click.echo(f"{check.name:<7} {'ok' if check.ok else 'FAIL':<5} {check.detail}")
        for warning in warnings:  # loud, but not a failed probe
            click.secho(f"{'security':<7} {'WARN':<5} {warning}", fg="yellow", bold=True)
    if not report.ok:
        raise SystemExit(1)


def register(group: click.Group) -> None:
    group.add_command(health)
