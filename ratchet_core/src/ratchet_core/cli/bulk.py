"""Filters of ``ratchet jobs retry|cancel|delete`` and ``ratchet jobs purge``.

``retry``/``cancel`` take a job id (the single-job form in :mod:`ratchet_core.cli.jobs`) or
filters; ``delete`` and ``purge`` are defined here and added to the ``jobs`` group.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import attrs
import click

from ratchet_api.model import JobStatus
from ratchet_api.store.entities import JobQuery
from ratchet_core.cli import get_container
from ratchet_core.cli.db import apply_url, parse_job_id, ratchet_errors, url_option
from ratchet_core.enqueue.bulk import BulkAction, BulkResult
from ratchet_core.enqueue.scheduler import SchedulerService
from ratchet_core.features.retention import (
    Retention,
    RetentionPolicy,
    RetentionReport,
    parse_retention,
)
from ratchet_core.runtime.config import parse_duration


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> timedelta | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def filter_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--status --target --tag --older-than --dry-run --all`` for a bulk command."""
    options = [
        click.option(
            "--status",
            "statuses",
            multiple=True,
            type=click.Choice([s.value for s in JobStatus], case_sensitive=False),
            help="Only jobs in this status (repeatable).",
        ),
        click.option("--target", default=None, metavar="MODULE:FUNCTION", help="Only this target."),
        click.option("--tag", default=None, help="Only jobs carrying this tag."),
        click.option(
            "--older-than",
            default=None,
            callback=_duration,
            metavar="DURATION",
            help="Only jobs created longer ago than this (30m, 12h, 7d).",
        ),
        click.option("--dry-run", is_flag=True, help="Only count the jobs that would change."),
        click.option("--all", "match_all", is_flag=True, help="Allow running without any filter."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def build_query(
    statuses: tuple[str, ...],
    target: str | None,
    tag: str | None,
    older_than: timedelta | None,
    now: Any,
) -> JobQuery:
    return JobQuery(
        statuses=frozenset(JobStatus(s.upper()) for s in statuses) or None,
        target=target,
        tag=tag,
        created_before=now - older_than if older_than is not None else None,
    )


def run_filtered(
    scheduler: SchedulerService,
    action: BulkAction,
    *,
    statuses: tuple[str, ...],
    target: str | None,
    tag: str | None,
    older_than: timedelta | None,
    dry_run: bool,
    match_all: bool,
) -> None:
    """Run a bulk action from the command line and print what it did."""
    if not (statuses or target or tag or older_than or match_all):
        raise click.UsageError(
            f"give a job id or at least one filter (--status, --target, --tag, --older-than); "
            f"--all {action.value}s every job it applies to"
        )
    with ratchet_errors():
        query = build_query(statuses, target, tag, older_than, scheduler.store.server_now())
        method = {
            BulkAction.RETRY: scheduler.retry_matching,
            BulkAction.CANCEL: scheduler.cancel_matching,
            BulkAction.DELETE: scheduler.delete_matching,
        }[action]
        result: BulkResult = method(query, dry_run=dry_run)
    past = {"retry": "retried", "cancel": "cancelled", "delete": "deleted"}[action.value]
    if result.dry_run:
        click.echo(f"{result.matched} job(s) would be {past} (dry run: nothing changed)")
    else:
        click.echo(f"{result.changed} of {result.matched} matching job(s) {past}")


def _scheduler(store_url: str | None) -> SchedulerService:
    apply_url(store_url)
    with ratchet_errors():
        scheduler: SchedulerService = get_container().scheduler()
    return scheduler


@click.command("delete")
@click.argument("job_id", required=False)
@filter_options
@url_option
def delete_jobs(  # noqa: PLR0917 - click passes options positionally
    job_id: str | None,
    statuses: tuple[str, ...],
    target: str | None,
    tag: str | None,
    older_than: timedelta | None,
    dry_run: bool,
    match_all: bool,
    store_url: str | None,
) -> None:
    """Delete one job (JOB_ID) or every job matching the filters (never a RUNNING job)."""
    scheduler = _scheduler(store_url)
    if job_id is not None:
        ident = parse_job_id(job_id)
        with ratchet_errors():
            deleted = scheduler.delete(ident)
        if not deleted:
            raise click.ClickException(f"job {ident} is RUNNING: cancel it first")
        click.echo(f"job {ident} deleted")
        return
    run_filtered(
        scheduler,
        BulkAction.DELETE,
        statuses=statuses,
        target=target,
        tag=tag,
        older_than=older_than,
        dry_run=dry_run,
        match_all=match_all,
    )


def _retention(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    try:
        return ("set", parse_retention(value))
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _print_report(report: RetentionReport) -> None:
    for status, n in sorted(report.archived.items(), key=lambda x: x[0].value):
        click.echo(f"archived {n} {status.value} job(s)")
    click.echo(f"deleted {report.archive_deleted} archived job(s)")
    click.echo(f"deleted {report.dead_letters_deleted} dead letter(s)")


@click.command("purge")
@click.option(
    "--succeeded", callback=_retention, metavar="AGE", help="Override retention.succeeded."
)
@click.option("--failed", callback=_retention, metavar="AGE", help="Override retention.failed.")
@click.option(
    "--cancelled", callback=_retention, metavar="AGE", help="Override retention.cancelled."
)
@click.option("--archive", callback=_retention, metavar="AGE", help="Override retention.archive.")
@url_option
def purge(succeeded: Any, failed: Any, cancelled: Any, archive: Any, store_url: str | None) -> None:
    """Run one retention sweep now: archive finished jobs older than their retention, delete
    archived jobs and dead letters past retention.archive. AGE is a duration (7d, 12h) or
    'never'."""
    scheduler = _scheduler(store_url)
    settings = get_container().settings()
    with ratchet_errors():
        policy = RetentionPolicy.from_config(settings)
        changes = {
            name: value[1]
            for name, value in (
                ("succeeded", succeeded),
                ("failed", failed),
                ("cancelled", cancelled),
                ("archive", archive),
            )
            if value is not None
        }
        retention = Retention(scheduler.store, attrs.evolve(policy, **changes))
        if not retention.archives:
            click.echo("the store has no archive: only old dead letters are deleted")
        report = retention.sweep()
    _print_report(report)


__all__ = ["build_query", "delete_jobs", "filter_options", "purge", "run_filtered"]
