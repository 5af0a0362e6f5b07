"""``manage.py ratchet_enqueue MODULE:FUNCTION [ARGS]...``: ``ratchet enqueue`` on this
project's store (the same options)."""

from __future__ import annotations

from ratchet_core.cli.enqueue import enqueue_command
from ratchet_core.contrib.django.clicommand import ClickCommand


class Command(ClickCommand):
    click_command = enqueue_command
