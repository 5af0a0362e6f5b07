"""``ratchet signal TARGET [PAYLOAD]``: deliver a signal to the job with id TARGET or to every
job waiting for the signal key TARGET (docs/signals.md)."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

import click

from ratchet_api.spi import SignalOutcome
from ratchet_core.cli import get_container
from ratchet_core.cli.db import apply_url, ratchet_errors, url_option


def _target(text: str, by_key: bool) -> UUID | str:
    if by_key:
        return text
    try:
        return UUID(text)
    except ValueError:
        return text


@click.command("signal")
@click.argument("target")
@click.argument("payload", required=False, default=None)
@click.option(
    "--key",
    "by_key",
    is_flag=True,
    help="Treat TARGET as a signal key even if it looks like a UUID.",
)
@url_option
def signal_command(target: str, payload: str | None, by_key: bool, store_url: str | None) -> None:
    """Deliver PAYLOAD (JSON; none: null) to the job TARGET (a job id) or to every job waiting
    for the signal key TARGET. Exit status 1 when no job took it."""
    try:
        value: Any = None if payload is None else json.loads(payload)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="PAYLOAD") from exc
    apply_url(store_url)
    with ratchet_errors():
        decision = get_container().scheduler().signal(_target(target, by_key), value)
    for job_id, outcome in decision.jobs.items():
        click.echo(f"job {job_id}: {outcome.value}")
    if decision.outcome is not SignalOutcome.DELIVERED:
        raise click.ClickException(f"signal {target!r} not delivered: {decision.outcome.value}")
    click.echo(f"signal {target!r} delivered to {len(decision.delivered_to)} job(s)")


def register(group: click.Group) -> None:
    group.add_command(signal_command)
