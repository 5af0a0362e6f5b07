"""``ratchet recurring list|show|pause|resume|delete|trigger``: manage recurring definitions."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import click
from rich.table import Table

from ratchet_api.errors import PayloadError, RecurringJobNotFoundError
from ratchet_api.model import priority_label
from ratchet_api.store.entities import RecurringJobEntity
from ratchet_core.cli import get_container
from ratchet_core.cli.db import apply_url, console, ratchet_errors, url_option
from ratchet_core.cli.safe import shown
from ratchet_core.enqueue.scheduler import SchedulerService
from ratchet_core.features.recurring.history import Firing, History, history
from ratchet_core.features.recurring.template import decode_template
from ratchet_core.payload.forms import decode_invocation


def _scheduler(store_url: str | None) -> SchedulerService:
    apply_url(store_url)
    with ratchet_errors():
        scheduler: SchedulerService = get_container().scheduler()
    return scheduler


def _local(value: datetime | None, tz: str) -> str:
    if value is None:
        return "-"
    try:
        zone = ZoneInfo(tz)
    except (ValueError, OSError, LookupError):
        return value.isoformat()
    return value.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")


def _utc(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value else "-"


def _record(d: RecurringJobEntity) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": d.name,
        "schedule": d.cron,
        "timezone": d.timezone,
        "target": d.target,
        "state": "active" if d.enabled else "paused",
        "misfire": d.misfire_policy.value.lower(),
        "priority": priority_label(d.priority),
        "max_retries": d.max_retries,
        "next_fire_at": d.next_fire_at.isoformat(),
        "next_fire_local": _local(d.next_fire_at, d.timezone),
        "last_fired_at": d.last_fired_at.isoformat() if d.last_fired_at else None,
        "created_at": d.created_at.isoformat(),
    }
    try:
        template = decode_template(d)
        record.update(
            tags=list(template.tags),
            execution_target=template.execution_target,
            max_instances=template.max_instances,
        )
        invocation = decode_invocation(template.invocation, _NIL)
        record.update(args=list(invocation.args), kwargs=dict(invocation.kwargs))
    except PayloadError as exc:
        record["payload_error"] = str(exc)
    return record


_NIL = UUID(int=0)
"""Stands for the job id in payload errors (a definition has none)."""


@click.group("recurring")
def recurring_group() -> None:
    """List, show, pause, resume, delete and trigger recurring jobs."""


@recurring_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines instead of a table.")
@url_option
def list_recurring(as_json: bool, store_url: str | None) -> None:
    """Every recurring definition with its next fire time (in its zone and in UTC)."""
    scheduler = _scheduler(store_url)
    with ratchet_errors():
        definitions = scheduler.recurring_jobs.list()
        latest = {d.name: _history(scheduler, d.name, 1) for d in definitions}
    if as_json:
        for d in definitions:
            record = _record(d)
            seen = latest[d.name]
            record["misfires"] = seen.misfires
            record["last_run"] = seen.firings[0].as_json() if seen.firings else None
            click.echo(json.dumps(record))
        return
    out = console()
    if not definitions:
        out.print("no recurring jobs")
        return
    table = Table(title=f"{len(definitions)} recurring job(s)")
    for column in (
        "id",
        "schedule",
        "target",
        "state",
        "next fire (zone)",
        "next fire (UTC)",
        "last fired (UTC)",
        "last run",
        "misfires",
    ):
        table.add_column(column, overflow="fold")
    for d in definitions:
        seen = latest[d.name]
        table.add_row(
            shown(d.name),  # stored data printed verbatim (cli/safe.py)
            shown(d.cron if d.timezone == "UTC" else f"{d.cron} ({d.timezone})"),
            shown(d.target),
            "[green]active[/]" if d.enabled else "[yellow]paused[/]",
            _local(d.next_fire_at, d.timezone),
            _utc(d.next_fire_at),
            _utc(d.last_fired_at),
            _run(seen.firings[0]) if seen.firings else "-",
            "-" if seen.misfires is None else str(seen.misfires),
        )
    out.print(table)


def _history(scheduler: SchedulerService, recurring_id: str, limit: int) -> History:
    try:
        return history(scheduler.store, recurring_id, limit)
    except Exception:  # noqa: BLE001 - a store that cannot search shows no runs
        return History(available=False)


def _run(firing: Firing) -> str:
    """A firing in a cell: its status, a misfire said so (features/recurring/history.py)."""
    if firing.skipped:
        return f"misfire: {firing.missed} slot(s) skipped"
    if firing.misfire:
        late = int(firing.late_by.total_seconds())
        return f"{firing.status.value} (misfire: {late} s late, {firing.missed} slot(s) dropped)"
    return firing.status.value


@recurring_group.command("show")
@click.argument("recurring_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@url_option
def show_recurring(recurring_id: str, as_json: bool, store_url: str | None) -> None:
    """One definition: schedule, options, arguments and its latest runs."""
    scheduler = _scheduler(store_url)
    with ratchet_errors():
        definition = scheduler.recurring_jobs.require(recurring_id)
        seen = _history(scheduler, recurring_id, 10)
    recent = seen.firings
    record = _record(definition)
    record["misfires"] = seen.misfires
    record["recent_runs"] = [
        {**f.as_json(), "slot": f.due_at.isoformat()}  # "slot": the key of earlier releases
        for f in recent
    ]
    if as_json:
        click.echo(json.dumps(record, indent=2))
        return
    out = console()
    table = Table(title=shown(f"recurring job {recurring_id}"), show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in record.items():
        if key == "recent_runs" or value is None or value in ([], {}):
            continue
        if isinstance(value, int):
            table.add_row(key, str(value))
            continue
        table.add_row(key, shown(value if isinstance(value, str) else json.dumps(value)))
    out.print(table)
    if recent:
        runs = Table(title="latest runs")
        for column in ("job", "slot (UTC)", "run"):
            runs.add_column(column, overflow="fold")
        for f in recent:
            runs.add_row(f.job_id, _utc(f.due_at), _run(f))
        out.print(runs)


def _change(name: str, done: str, unchanged: str) -> Any:
    @recurring_group.command(name)
    @click.argument("recurring_id")
    @url_option
    def command(recurring_id: str, store_url: str | None) -> None:
        scheduler = _scheduler(store_url)
        with ratchet_errors():
            changed = getattr(scheduler.recurring_jobs, name)(recurring_id)
        if not changed:
            if name == "delete":
                raise click.ClickException(str(RecurringJobNotFoundError(recurring_id)))
            click.echo(f"recurring job {recurring_id} {unchanged}")
            return
        click.echo(f"recurring job {recurring_id} {done}")

    return command


pause_recurring = _change("pause", "paused", "was already paused")
pause_recurring.help = "Stop firing a recurring job (its slots are skipped until resumed)."
resume_recurring = _change("resume", "resumed", "was not paused")
resume_recurring.help = "Fire a paused recurring job again, from its next slot after now."
delete_recurring = _change("delete", "deleted", "")
delete_recurring.help = "Delete a recurring definition (jobs it already fired stay)."


@recurring_group.command("trigger")
@click.argument("recurring_id")
@url_option
def trigger_recurring(recurring_id: str, store_url: str | None) -> None:
    """Run a recurring job once now, outside its schedule; prints the job id."""
    scheduler = _scheduler(store_url)
    with ratchet_errors():
        job_id = scheduler.recurring_jobs.trigger_now(recurring_id)
    click.echo(str(job_id))


def register(group: click.Group) -> None:
    group.add_command(recurring_group)
