"""``manage.py ratchet_jobs``: list, show, cancel, retry jobs of this project's store."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ratchet_api.errors import RatchetError
from ratchet_api.model import JobStatus
from ratchet_api.store.entities import JobQuery


class Command(BaseCommand):
    help = "List jobs (optionally by status/tag), show one, or cancel/retry/pause/resume one."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "action",
            nargs="?",
            default="list",
            choices=["list", "show", "cancel", "retry", "pause", "resume"],
        )
        parser.add_argument("job_id", nargs="?", help="the job id (all actions but list)")
        parser.add_argument("--status", choices=[s.value for s in JobStatus])
        parser.add_argument("--tag")
        parser.add_argument("--limit", type=int, default=20)

    def handle(self, *args: Any, **options: Any) -> None:
        from ratchet_core.contrib.django import get_scheduler

        try:
            scheduler = get_scheduler()
            action = options["action"]
            if action == "list":
                self._list(scheduler, options)
                return
            if not options["job_id"]:
                raise CommandError(f"{action} needs a job id")
            try:
                job_id = UUID(options["job_id"])
            except ValueError:
                raise CommandError(f"{options['job_id']!r} is not a job id") from None
            if action == "show":
                detail = scheduler.detail(job_id)  # decrypted, masked when masking is on
                if detail is None:
                    raise CommandError(f"job {job_id} not found")
                self.stdout.write(
                    f"{detail.id} {detail.status} {detail.target} attempt={detail.attempt} "
                    f"args={detail.args!r} kwargs={detail.kwargs!r} "
                    f"result={detail.result!r} error={detail.error!r}"
                )
                return
            done = getattr(scheduler, action)(job_id)
            self.stdout.write(f"{action} {job_id}: {'done' if done else 'not applicable'}")
        except RatchetError as exc:
            raise CommandError(str(exc)) from exc

    def _list(self, scheduler: Any, options: dict[str, Any]) -> None:
        status = options["status"]
        query = JobQuery(
            statuses=frozenset({JobStatus(status)}) if status else None,
            tag=options["tag"],
            limit=options["limit"],
        )
        for job in scheduler.search(query):
            self.stdout.write(f"{job.id} {job.status:<15} {job.target} attempt={job.attempt}")
