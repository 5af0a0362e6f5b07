"""``manage.py ratchet_worker``: ``ratchet worker`` on this project's container (the same
options), plus ``--queue NAME`` to run the tasks of one Django Tasks queue only."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ratchet_core.cli.worker import worker_command
from ratchet_core.contrib.django.clicommand import ClickCommand


class Command(ClickCommand):
    click_command = worker_command

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
