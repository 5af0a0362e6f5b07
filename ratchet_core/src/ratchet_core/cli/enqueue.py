"""``ratchet enqueue module:function [ARGS...]``: create a job from the command line."""

from __future__ import annotations

import json
from typing import Any

import click

from ratchet_api.model import JobPriority
from ratchet_core.cli import get_container, import_object
from ratchet_core.cli.db import apply_url, ratchet_errors, require_existing_database, url_option
from ratchet_core.defaults.security import ALLOW_ALL_WARNING, allows_everything
from ratchet_core.enqueue.scheduler import SchedulerService


def _json_or_text(value: str) -> Any:
    """A JSON value (``42``, ``"x"``, ``[1, 2]``, ``{"id": 1}``); anything that is not valid
    JSON is taken as a plain string (``ada`` -> ``"ada"``)."""
    try:
        return json.loads(value)
    except ValueError:
        return value


def import_target(spec: str) -> Any:
    """The function named by ``module:qualname`` (the current directory is importable)."""
    return import_object(spec, example="myapp.jobs:send_email", param_hint="MODULE:FUNCTION")


@click.command("enqueue")
@click.argument("target", metavar="MODULE:FUNCTION")
@click.argument("args", nargs=-1, metavar="[ARGS]...")
@click.option(
    "--kwarg",
    "-k",
    "kwargs",
    multiple=True,
    metavar="NAME=JSON",
    help="A keyword argument (repeatable), e.g. -k count=3.",
)
@click.option("--delay", type=click.FloatRange(min=0), default=None, help="Run after SECONDS.")
@click.option(
    "--priority",
    default=None,
    metavar="INT|NAME",
    help="-100..100, higher runs first, or a name: "
    + ", ".join(f"{p.name.lower()} ({p.value})" for p in JobPriority)
    + ".",
)
@click.option("--tag", "tags", multiple=True, help="A tag (repeatable).")
@click.option("--max-retries", type=click.IntRange(min=0), default=None)
@click.option("--idempotency-key", default=None, help="Enqueue at most once per key.")
@url_option
def enqueue_command(  # noqa: PLR0917 - click passes options positionally
    target: str,
    args: tuple[str, ...],
    kwargs: tuple[str, ...],
    delay: float | None,
    priority: str | None,
    tags: tuple[str, ...],
    max_retries: int | None,
    idempotency_key: str | None,
    store_url: str | None,
) -> None:
    """Enqueue MODULE:FUNCTION with ARGS given as JSON values (text that is not JSON is
    passed as a string). Prints the job id.

    \b
    Examples:
      ratchet enqueue myapp.jobs:send_email 42 '"welcome"'
      ratchet enqueue myapp.jobs:ship '[{"id": 1, "item": "tea"}]' --delay 60
    """
    fn = import_target(target)
    keyword: dict[str, Any] = {}
    for item in kwargs:
        name, sep, raw = item.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"expected NAME=JSON, got {item!r}", param_hint="--kwarg")
        keyword[name.strip()] = _json_or_text(raw)
    apply_url(store_url)
    with ratchet_errors():
        container = get_container()
        if allows_everything(container.settings()):
            click.secho(f"warning: {ALLOW_ALL_WARNING}", err=True, fg="yellow", bold=True)
        require_existing_database(container)
        scheduler: SchedulerService = container.scheduler()
        builder = scheduler.job(fn).args(*(_json_or_text(a) for a in args)).kwargs(**keyword)
        if delay:
            builder.delay(delay)
        if priority:
            builder.priority(priority)
        if tags:
            builder.tags(*tags)
        if max_retries is not None:
            builder.max_retries(max_retries)
        if idempotency_key:
            builder.idempotency_key(idempotency_key)
        job_id = builder.enqueue()
    click.echo(str(job_id))


def register(group: click.Group) -> None:
    group.add_command(enqueue_command)
