"""``manage.py ratchet_worker``: ``ratchet worker`` on this project's container (the same
options), plus ``--queue NAME`` to run the tasks of one Django Tasks queue only.

As Django's ``db_worker``: signal handlers come first (before the container and the store), a
SIGTERM/SIGINT/SIGQUIT stops gracefully with exit code 0, and a second one exits at once, also
with 0. System checks are not run first (``manage.py check`` is the place for them): a bad
Ratchet configuration is still reported, as the container is built."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ratchet_core.cli.worker import WorkerSignals, worker_command
from ratchet_core.contrib.django.clicommand import ClickCommand


class Command(ClickCommand):
    click_command = worker_command
    # The worker builds (and so checks) Ratchet's configuration itself; running every
    # project check first would delay the first claim by the whole check suite.
    requires_system_checks = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._signals: WorkerSignals | None = None

    def run_from_argv(self, argv: list[str]) -> None:
        # From the command line only (call_command leaves a test process's handlers alone);
        # installed already while Django imported the apps (early), else now.
        from ratchet_core.contrib.django.early import worker_signals

        # They stay installed when the command returns: the process is ending, and a signal
        # during its exit must not find the default handler (-15) either.
        self._signals = worker_signals().install()
        super().run_from_argv(argv)

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--queue",
            metavar="NAME",
            help="Only run Django tasks of this queue (queue_name): claims only jobs tagged "
            "django-queue:NAME (node.tags.required). Plain Ratchet jobs carry no queue tag, "
            "so a worker with --queue does not run them.",
        )

    def settings_from(self, options: dict[str, Any]) -> dict[str, str]:
        from ratchet_core.contrib.django.tasks import QUEUE_TAG_PREFIX

        queue = options.get("queue")
        if not queue:
            return {}
        return {"node.tags.required": f"{QUEUE_TAG_PREFIX}{queue}"}

    def cli_state_options(self) -> dict[str, Any]:
        return {"worker_signals": self._signals, "route_loguru": True}

    def handle(self, *args: Any, **options: Any) -> None:
        from ratchet_core.contrib.django.logs import reported_by_django_tasks

        with reported_by_django_tasks():
            super().handle(*args, **options)
