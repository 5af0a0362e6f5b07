"""``ratchet jobs list|show|cancel|retry|pause|resume``: inspect and manage stored jobs (the
filters of ``cancel``/``retry`` and the ``delete``/``purge`` commands are in
:mod:`ratchet_core.cli.bulk`)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from uuid import UUID

import attrs
import click

from ratchet_api.errors import JobNotFoundError, RatchetError
from ratchet_api.model import EncryptionSurface, JobDetail, JobStatus, priority_label
from ratchet_api.store.entities import JobEntity, JobQuery
from ratchet_api.store.protocols import JobAuditStore
from ratchet_core.cli import get_container
from ratchet_core.cli.bulk import delete_jobs, filter_options, purge, run_filtered
from ratchet_core.cli.db import (
    apply_url,
    console,
    parse_job_id,
    ratchet_errors,
    require_existing_database,
    url_option,
)
from ratchet_core.cli.safe import shown
from ratchet_core.enqueue.bulk import BulkAction
from ratchet_core.enqueue.scheduler import SchedulerService
from ratchet_core.features.workflow.view import draw, workflow_of

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
        container = get_container()
        require_existing_database(container)
        scheduler: SchedulerService = container.scheduler()
    return scheduler


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _short(text: str | None, limit: int = 60) -> str:
    if not text:
        return ""
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


DJANGO_TASK_TAG = "django-task:"
"""The tag the Django Tasks backend gives each job (``ratchet_core.contrib.django.tasks``)."""


def django_task(job: JobEntity) -> str | None:
    """The dotted path of the Django task a job runs (its target is the backend's shared
    ``execute_django_task``), or None for any other job."""
    for tag in job.tags:
        if tag.startswith(DJANGO_TASK_TAG):
            return tag[len(DJANGO_TASK_TAG) :]
    return None


def shown_target(job: JobEntity) -> str:
    """What a listing shows as the job's target: a Django task's own path, else the target."""
    task = django_task(job)
    return f"{task} (django task)" if task else job.target


LIST_PREVIEW = 4096
"""``jobs list`` asks the store for at most this many characters (plus one) of each job's
arguments and result (``JobQuery.preview``): a listing never loads a 100 MB result."""


def _without_cut_values(
    jobs: list[JobEntity],
) -> tuple[list[JobEntity], dict[Any, dict[str, Any]]]:
    """The jobs with every value the store cut for the listing taken out (a cut JSON value is
    neither readable nor maskable: it is never shown), and what was cut, by job id."""
    out: list[JobEntity] = []
    cut: dict[Any, dict[str, Any]] = {}
    for job in jobs:
        flags: dict[str, Any] = {}
        kept = job
        if job.result is not None and len(job.result) > LIST_PREVIEW:
            kept = attrs.evolve(job, result=None)
            flags["result_cut"] = True
        if len(job.payload) > LIST_PREVIEW:
            flags["arguments_cut"] = True
        if flags:
            cut[job.id] = flags
        out.append(kept)
    return out, cut


def _job_dict(job: JobEntity, detail: JobDetail) -> dict[str, Any]:
    """The job's fields, with the result and error as the readable (decrypted, masked) view
    shows them."""
    return {
        "id": str(job.id),
        "status": job.status.value,
        "target": job.target,
        "django_task": django_task(job),
        "priority": priority_label(job.priority),
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
        "result": detail.result,
        "last_error": detail.error,
        "encrypted": detail.encrypted,
        "unreadable": detail.unreadable,
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
        preview=LIST_PREVIEW,  # the store need not load whole arguments or results
    )
    with ratchet_errors():
        jobs = scheduler.search(query)
    jobs, cut = _without_cut_values(jobs)
    details = scheduler.details.details(jobs)
    if as_json:
        for job, detail in zip(jobs, details, strict=True):
            record = _job_dict(job, detail)
            if job.id in cut:
                record.update(cut[job.id])
                if cut[job.id].get("arguments_cut") and record["unreadable"]:
                    # the cut arguments are not read by a listing: not a problem of the job
                    problems = str(record["unreadable"]).split("; ")
                    kept = [p for p in problems if not p.startswith("arguments:")]
                    record["unreadable"] = "; ".join(kept) or None
            click.echo(json.dumps(record))
        return
    out = console()
    if not jobs:
        out.print("no jobs match")
        return
    from rich.table import Table

    table = Table(title=f"{len(jobs)} job(s)")
    for column in ("id", "status", "target", "attempt", "scheduled", "finished", "result / error"):
        table.add_column(column, overflow="fold")
    for job, detail in zip(jobs, details, strict=True):
        value = detail.error if job.status is JobStatus.FAILED else detail.result
        outcome = value if value is None or isinstance(value, str) else json.dumps(value)
        if job.status is not JobStatus.FAILED and cut.get(job.id, {}).get("result_cut"):
            outcome = f"(result over {LIST_PREVIEW} characters: jobs show)"
        table.add_row(  # stored data printed verbatim (cli/safe.py)
            str(job.id),
            f"[{STATUS_STYLES.get(job.status, 'white')}]{job.status.value}[/]",
            shown(shown_target(job)),
            f"{job.attempt}/{job.max_retries + 1}",
            _when(job.scheduled_at),
            _when(job.finished_at),
            shown(_short(outcome)),
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
    detail = scheduler.details.detail(job)
    record = _job_dict(job, detail)
    record["args"] = list(detail.args) if detail.args is not None else "(not readable)"
    record["kwargs"] = dict(detail.kwargs) if detail.kwargs is not None else None
    record["properties"] = dict(detail.properties)
    if detail.masked:
        record["masked"] = True
    audit = scheduler.store.capability(JobAuditStore)
    executions = [
        attrs.evolve(e, error=_readable_error(scheduler, job, e.error))
        for e in (audit.find_executions_by_job_id(job.id) if audit is not None else [])
    ]
    logs = audit.find_logs_by_job_id(job.id, limit=50) if audit is not None else []
    with ratchet_errors():
        workflow = workflow_of(scheduler.store, job)
    if as_json:
        record["workflow"] = workflow
        record["executions"] = [
            {
                "attempt": e.attempt,
                "status": e.status.value,
                "node": e.node_id,
                "duration_ms": e.duration_ms,
                "error": e.error,
                "traceback": e.traceback,
                "superseded": e.superseded,
            }
            for e in executions
        ]
        click.echo(json.dumps(record, indent=2))
        return
    out = console()
    from rich.table import Table

    table = Table(title=f"job {job.id}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in record.items():
        if value is None or value in ([], {}):
            continue
        text = value if isinstance(value, str) else json.dumps(value)
        style = STATUS_STYLES.get(job.status, "white") if key == "status" else ""
        table.add_row(key, shown(text, style=style))  # stored data printed verbatim
    out.print(table)
    if workflow is not None:
        out.print("[bold]workflow[/]")
        for drawn in draw(workflow):
            out.print(shown(f"  {drawn}"), highlight=False)
    if executions:
        history = Table(title="executions")
        for column in ("attempt", "status", "node", "duration", "error"):
            history.add_column(column, overflow="fold")
        for e in executions:
            history.add_row(
                str(e.attempt),
                f"{e.status.value} (superseded)" if e.superseded else e.status.value,
                shown(e.node_id),
                f"{e.duration_ms} ms" if e.duration_ms is not None else "-",
                shown(_short(e.error, 80)),
            )
        out.print(history)
        failed = [e for e in executions if e.traceback]
        if failed:
            last = failed[-1]
            out.print(f"[bold]traceback of attempt {last.attempt}[/]")
            out.print(shown(last.traceback, multiline=True), highlight=False)
    if logs:
        out.print("[bold]log[/]")
        for line in logs:
            out.print(
                shown(f"  {_when(line.logged_at)} {line.level.value:<7} {line.message}"),
                highlight=False,
            )


def _readable_error(scheduler: SchedulerService, job: JobEntity, text: str | None) -> str | None:
    if text is None:
        return None
    try:
        return scheduler.codec.open(text, job.id, EncryptionSurface.ERROR)
    except RatchetError as exc:
        return f"(not readable: {exc})"


def _transition(name: str, past: str, refused: str) -> Any:
    @jobs_group.command(name)
    @click.argument("job_id")
    @url_option
    def command(job_id: str, store_url: str | None) -> None:
        _apply(name, past, refused, job_id, store_url)

    return command


def _bulk_transition(name: str, past: str, refused: str, action: BulkAction) -> Any:
    @jobs_group.command(name)
    @click.argument("job_id", required=False)
    @filter_options
    @url_option
    def command(job_id: str | None, store_url: str | None, **filters: Any) -> None:
        if job_id is None:
            run_filtered(_scheduler(store_url), action, **filters)
        else:
            _apply(name, past, refused, job_id, store_url)

    return command


def _apply(name: str, past: str, refused: str, job_id: str, store_url: str | None) -> None:
    ident = parse_job_id(job_id)
    scheduler = _scheduler(store_url)
    with ratchet_errors():
        changed = getattr(scheduler, name)(ident)
        job = scheduler.get(ident)
    status = job.status.value if job else "gone"
    if not changed:
        raise click.ClickException(f"job {ident} is {status}: {refused}")
    click.echo(f"job {ident} {past} (now {status})")


cancel_job = _bulk_transition(
    "cancel", "cancelled", "only unfinished jobs can be cancelled", BulkAction.CANCEL
)
cancel_job.help = (
    "Cancel a job that has not finished (JOB_ID), or every unfinished job matching the filters."
)
retry_job = _bulk_transition(
    "retry",
    "sent back to the queue",
    "only FAILED (dead letter) jobs can be retried",
    BulkAction.RETRY,
)
retry_job.help = (
    "Retry a dead-lettered (FAILED) job (JOB_ID), or every FAILED job matching the filters: "
    "back to PENDING, attempts reset."
)
pause_job = _transition("pause", "paused", "only PENDING jobs can be paused")
pause_job.help = "Hold a PENDING job until it is resumed."
resume_job = _transition("resume", "resumed", "only PAUSED jobs can be resumed")
resume_job.help = "Release a PAUSED job."


jobs_group.add_command(delete_jobs)
jobs_group.add_command(purge)


def register(group: click.Group) -> None:
    group.add_command(jobs_group)
