"""``ratchet demo``: the quickstart in one command.

Creates (or reuses) a SQLite database, migrates it, enqueues the example jobs of
:mod:`ratchet_core.demo_jobs`, runs a worker in this process until they are done and prints
what happened to each.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any
from uuid import UUID

import click

from ratchet_api.model import BackoffPolicy, JobStatus
from ratchet_core import demo_jobs
from ratchet_core.cli import CliState, get_container
from ratchet_core.cli.db import console, ratchet_errors, schema_manager
from ratchet_core.enqueue.scheduler import SchedulerService

DEFAULT_DEMO_URL = "sqlite:///ratchet-demo.db"

# what each demo job should end as: the demo fails (exit 1) when reality differs
EXPECTED = {
    "send_welcome_email": JobStatus.SUCCEEDED,
    "invoice_total": JobStatus.SUCCEEDED,
    "sync_inventory": JobStatus.SUCCEEDED,
    "charge_card": JobStatus.FAILED,
    "fetch_exchange_rate": JobStatus.SUCCEEDED,
}


def _enqueue_examples(scheduler: SchedulerService) -> list[tuple[str, str, UUID]]:
    quick_retry = BackoffPolicy.fixed(0.2)
    orders = [
        demo_jobs.Order(id=1, item="espresso beans", price=Decimal("12.50"), quantity=2),
        demo_jobs.Order(id=2, item="milk frother", price=Decimal("39.90")),
    ]
    return [
        (
            "send_welcome_email",
            "a plain job",
            scheduler.enqueue(demo_jobs.send_welcome_email, "ada@example.com"),
        ),
        (
            "invoice_total",
            "typed arguments: list[Order]",
            scheduler.job(demo_jobs.invoice_total).args("ACME", orders).tags("billing").enqueue(),
        ),
        (
            "sync_inventory",
            "fails twice, then succeeds",
            scheduler.job(demo_jobs.sync_inventory)
            .args("berlin-1")
            .max_retries(3)
            .backoff(quick_retry)
            .enqueue(),
        ),
        (
            "charge_card",
            "always fails: dead letter",
            scheduler.job(demo_jobs.charge_card)
            .args("4242424242424242")
            .max_retries(2)
            .backoff(quick_retry)
            .enqueue(),
        ),
        (
            "fetch_exchange_rate",
            "an async def job",
            scheduler.enqueue(demo_jobs.fetch_exchange_rate, "EUR"),
        ),
    ]


@click.command("demo")
@click.option(
    "--url",
    "store_url",
    default=DEFAULT_DEMO_URL,
    show_default=True,
    help="Where the demo keeps its jobs.",
)
@click.option("--timeout", default=60.0, show_default=True, help="Give up after SECONDS.")
def demo_command(store_url: str, timeout: float) -> None:
    """Run the quickstart: enqueue example jobs (one fails and retries, one ends in the dead
    letter), process them with a worker and show what happened."""
    ctx = click.get_current_context()
    root = ctx.find_root()
    if not isinstance(root.obj, CliState):
        root.obj = CliState()
    root.obj.settings.update(
        {
            "store.url": store_url,
            "security.allowed_packages": "ratchet_core.demo_jobs",
            "worker.poll_interval": "0.02",
            "worker.poll_max_interval": "0.2",
        }
    )
    out = console()
    with ratchet_errors():
        container = get_container()
        store = container.job_store()
        manager = schema_manager(store)
        if manager is not None:
            manager.upgrade()
        out.print(f"[bold]Ratchet demo[/] - jobs are stored in {store_url}")
        scheduler: SchedulerService = container.scheduler()
        jobs = _enqueue_examples(scheduler)
        out.print(f"enqueued {len(jobs)} jobs; running a worker until they are done...")
        worker: Any = container.worker()
        stats = worker.run_until_idle(timeout=timeout)

    from rich.table import Table

    table = Table(title="What happened")
    for column in ("job", "what it shows", "status", "attempts", "result / error", "id"):
        table.add_column(column, overflow="fold")
    unexpected: list[str] = []
    for name, what, job_id in jobs:
        job = scheduler.get(job_id)
        if job is None:
            unexpected.append(f"{name}: job disappeared")
            continue
        outcome = scheduler.result(job_id).error if job.status is JobStatus.FAILED else None
        if outcome is None and job.result is not None:
            outcome = str(scheduler.result(job_id).value)
        colour = {JobStatus.SUCCEEDED: "green", JobStatus.FAILED: "red"}.get(job.status, "yellow")
        table.add_row(
            name,
            what,
            f"[{colour}]{job.status.value}[/]",
            str(job.attempt),
            outcome or "",
            str(job.id),
        )
        if job.status is not EXPECTED[name]:
            unexpected.append(f"{name} ended {job.status.value}, expected {EXPECTED[name].value}")
    out.print(table)
    out.print(
        f"worker: {stats.claimed} claims, {stats.succeeded} succeeded, {stats.retried} retried, "
        f"{stats.failed} dead-lettered"
    )
    if unexpected:
        raise click.ClickException("the demo did not finish as expected: " + "; ".join(unexpected))
    out.print(
        "\nNext: [bold]ratchet jobs list --url "
        f"{store_url}[/], [bold]ratchet jobs show <id> --url {store_url}[/], "
        "and docs/quickstart.md to enqueue your own jobs."
    )


def register(group: click.Group) -> None:
    group.add_command(demo_command)
