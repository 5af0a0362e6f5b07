"""``manage.py ratchet_worker [--burst] [--timeout S]``: run a Ratchet worker in this project."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ratchet_api.errors import RatchetError


class Command(BaseCommand):
    help = (
        "Run a Ratchet worker with the project's settings (Ctrl-C or SIGTERM stops it "
        "gracefully). --burst processes the due jobs and exits."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Run until no due job is left, then exit (status 1 if --timeout passed first).",
        )
        parser.add_argument(
            "--timeout",
            type=float,
            default=60.0,
            help="With --burst: give up after this many seconds (default 60).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from ratchet_core.contrib._worker import run_worker, start_worker
        from ratchet_core.contrib.django import get_container

        try:
            worker = start_worker(get_container(), upgrade_command="manage.py ratchet_migrate")
        except RatchetError as exc:
            raise CommandError(str(exc)) from exc
        if not run_worker(
            worker, burst=options["burst"], timeout=options["timeout"], echo=self.stdout.write
        ):
            raise CommandError(f"jobs were still due after {options['timeout']} s")
