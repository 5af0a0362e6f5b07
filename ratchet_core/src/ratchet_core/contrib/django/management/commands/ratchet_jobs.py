"""``manage.py ratchet_jobs list|show|cancel|retry|pause|resume``: ``ratchet jobs`` on this
project's store (the same subcommands and options)."""

from __future__ import annotations

from ratchet_core.cli.jobs import jobs_group
from ratchet_core.contrib.django.clicommand import ClickCommand


class Command(ClickCommand):
    click_command = jobs_group
