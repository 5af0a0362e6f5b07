"""``manage.py db_worker`` of the upstream-suite runs: django-tasks-db's command line (the
options its tests pass) translated to ``manage.py ratchet_worker``, which does the work.

``--batch`` is ``--burst``; ``--queue-name NAME`` is ``--queue NAME`` (``*``: every queue);
``--interval``, ``--no-startup-delay``, ``--worker-id``, ``--max-tasks`` and ``--backend`` have no
counterpart and are accepted and ignored (said in the runner's report)."""

from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ratchet_core.contrib.django.management.commands.ratchet_worker import (
    Command as RatchetWorker,
)


def translated(options: dict[str, Any]) -> list[str]:
    argv = ["--no-status"]
    if options.get("batch"):
        argv.append("--burst")
    queue = options.get("queue_name")
    if queue and queue != "*":
        argv += ["--queue", str(queue)]
    return argv


class Command(BaseCommand):
    help = "django-tasks-db's db_worker, run by ratchet_worker (upstream-suite runs only)."
    requires_system_checks = ()

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--queue-name", default="default")
        parser.add_argument("--backend", default="default")
        parser.add_argument("--batch", action="store_true")
        parser.add_argument("--interval", type=float, default=1.0)
        parser.add_argument("--startup-delay", dest="startup_delay", action="store_true")
        parser.add_argument("--no-startup-delay", dest="startup_delay", action="store_false")
        parser.add_argument("--worker-id", default="")
        parser.add_argument("--max-tasks", type=int, default=None)
        parser.add_argument("--exclude-queue", action="append", default=[])

    def run_from_argv(self, argv: list[str]) -> None:
        parser = self.create_parser(argv[0], argv[1])
        options = vars(parser.parse_args(argv[2:]))
        if argv[0] == "django-admin" and not options["batch"]:
            # upstream's tests of db_worker's own option checks run it in the test process
            # (execute_from_command_line): a worker without --batch would never return there
            raise CommandError(
                "db_worker shim: not run in the test process without --batch "
                "(ratchet_worker has none of db_worker's option checks)"
            )
        verbosity = ["-v", str(options.get("verbosity", 1))]
        RatchetWorker().run_from_argv([argv[0], "ratchet_worker", *translated(options), *verbosity])

    def handle(self, *args: Any, **options: Any) -> None:
        argv = translated(options)
        if "--burst" not in argv:
            raise CommandError("db_worker shim: call_command without batch=True would not return")
        call_command("ratchet_worker", *argv, "--burst-timeout", "120")
