"""``ratchet jobs list|show|cancel|retry|pause|resume``: inspect and manage stored jobs."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from uuid import UUID

import click
from rich.table import Table

from ratchet_api.errors import JobNotFoundError
from ratchet_api.model import JobStatus
from ratchet_api.store.entities import JobEntity, JobQuery
from ratchet_api.store.protocols import JobAuditStore
from ratchet_core.cli import get_container
from ratchet_core.cli.db import apply_url, console, parse_job_id, ratchet_errors, url_option
from ratchet_core.payload import decode_invocation
from ratchet_core.scheduler import SchedulerService

STATUS_STYLES = {
    JobStatus.SUCCEEDED: "green",
    JobStatus.FAILED: "red",
    JobStatus.CANCELLED: "dim",
    JobStatus.RUNNING: "cyan",
    JobStatus.PAUSED: "yellow",
}


def _scheduler(store_url: str | None) -> SchedulerService:
    apply_url(store_url)
    with ratchet_errors():
        scheduler: SchedulerService = get_container().scheduler()
    return scheduler


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _short(text: str | None, limit: int = 60) -> str:
    if not text:
        return ""
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _job_dict(job: JobEntity) -> dict[str, Any]:
    return {
        "id": str(job.id),
        "status": job.status.value,
        "target": job.target,
        "priority": job.priority.name.lower(),
        "attempt": job.attempt,
        "max_retries": job.max_retries,
        "tags": list(job.tags),
        "scheduled_at": job.scheduled_at.isoformat(),
        "created_at": job.created_at.isoformat(),
        "started_at": job.started_at.isoformat() if job.started_at else None,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        "idempotency_key": job.idempotency_key,
        "execution_target": job.execution_target,
        "owner": job.owner,
        "result": job.result,
        "last_error": job.last_error,
    }


@click.group("jobs")
def jobs_group() -> None:
    """List, show, cancel, retry, pause and resume jobs."""


@jobs_group.command("list")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice([s.value for s in JobStatus], case_sensitive=False),
    help="Only jobs in this status (repeatable).",
)
@click.option("--tag", default=None, help="Only jobs carrying this tag.")
@click.option("--target", default=None, metavar="MODULE:FUNCTION", help="Only jobs of this target.")
@click.option(
    "--batch", "batch_id", default=None, type=click.UUID, help="Only this batch's children."
)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines instead of a table.")
@url_option
def list_jobs(  # noqa: PLR0917 - click passes options positionally
    statuses: tuple[str, ...],
    tag: str | None,
    target: str | None,
    batch_id: UUID | None,
    limit: int,
    as_json: bool,
    store_url: str | None,
) -> None:
    """List jobs, newest first."""
    scheduler = _scheduler(store_url)
    query = JobQuery(
        statuses=frozenset(JobStatus(s.upper()) for s in statuses) or None,
        tag=tag,
        target=target,
        batch_id=batch_id,
        limit=limit,
    )
    with ratchet_errors():
        jobs = scheduler.search(query)
    if as_json:
        for job in jobs:
            click.echo(json.dumps(_job_dict(job)))
        return
    out = console()
    if not jobs:
        out.print("no jobs match")
        return
    table = Table(title=f"{len(jobs)} job(s)")
    for column in ("id", "status", "target", "attempt", "scheduled", "finished", "result / error"):
        table.add_column(column, overflow="fold")
    for job in jobs:
        outcome = job.last_error if job.status is JobStatus.FAILED else job.result
        table.add_row(
            str(job.id),
            f"[{STATUS_STYLES.get(job.status, 'white')}]{job.status.value}[/]",
            job.target,
            f"{job.attempt}/{job.max_retries + 1}",
            _when(job.scheduled_at),
            _when(job.finished_at),
            _short(outcome),
        )
    out.print(table)


@jobs_group.command("show")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@url_option
def show_job(job_id: str, as_json: bool, store_url: str | None) -> None:
    """Show one job: its fields, arguments, result or error, and its executions."""
    ident = parse_job_id(job_id)
    scheduler = _scheduler(store_url)
    with ratchet_errors():
        job = scheduler.get(ident)
        if job is None:
            raise JobNotFoundError(ident)
    record = _job_dict(job)
    try:
        invocation = decode_invocation(job.payload, job.id)
        record["args"] = list(invocation.args)
        record["kwargs"] = dict(invocation.kwargs)
    except ValueError:
        record["args"] = "(payload not readable: encrypted or written by another version)"
    audit = scheduler.store.capability(JobAuditStore)
    executions = audit.find_executions_by_job_id(job.id) if audit is not None else []
    logs = audit.find_logs_by_job_id(job.id, limit=50) if audit is not None else []
    if as_json:
        record["executions"] = [
            {
                "attempt": e.attempt,
                "status": e.status.value,
                "node": e.node_id,
                "duration_ms": e.duration_ms,
                "error": e.error,
            }
            for e in executions
        ]
        click.echo(json.dumps(record, indent=2))
        return
    out = console()
    table = Table(title=f"job {job.id}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in record.items():
        if value is None or value in ([], {}):
            continue
        text = value if isinstance(value, str) else json.dumps(value)
        if key == "status":
            text = f"[{STATUS_STYLES.get(job.status, 'white')}]{text}[/]"
        table.add_row(key, text)
    out.print(table)
    if executions:
        history = Table(title="executions")
        for column in ("attempt", "status", "node", "duration", "error"):
            history.add_column(column, overflow="fold")
        for e in executions:
            history.add_row(
                str(e.attempt),
                e.status.value,
                e.node_id,
                f"{e.duration_ms} ms" if e.duration_ms is not None else "-",
                _short(e.error, 80),
            )
        out.print(history)
    if logs:
        out.print("[bold]log[/]")
        for line in logs:
            out.print(f"  {_when(line.logged_at)} {line.level.value:<7} {line.message}")


def _transition(name: str, past: str, refused: str) -> Any:
    @jobs_group.command(name)
    @click.argument("job_id")
    @url_option
    def command(job_id: str, store_url: str | None) -> None:
        ident = parse_job_id(job_id)
        scheduler = _scheduler(store_url)
        with ratchet_errors():
            changed = getattr(scheduler, name)(ident)
            job = scheduler.get(ident)
        status = job.status.value if job else "gone"
        if not changed:
            raise click.ClickException(f"job {ident} is {status}: {refused}")
        click.echo(f"job {ident} {past} (now {status})")

    return command


cancel_job = _transition("cancel", "cancelled", "only unfinished jobs can be cancelled")
cancel_job.help = "Cancel a job that has not finished."
retry_job = _transition(
    "retry", "sent back to the queue", "only FAILED (dead letter) jobs can be retried"
)
retry_job.help = "Retry a dead-lettered (FAILED) job: back to PENDING, attempts reset."
pause_job = _transition("pause", "paused", "only PENDING jobs can be paused")
pause_job.help = "Hold a PENDING job until it is resumed."
resume_job = _transition("resume", "resumed", "only PAUSED jobs can be resumed")
resume_job.help = "Release a PAUSED job."


def register(group: click.Group) -> None:
    group.add_command(jobs_group)
