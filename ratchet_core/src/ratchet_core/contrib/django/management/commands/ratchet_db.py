"""``manage.py ratchet_db upgrade|downgrade|current``: ``ratchet db`` on this project's store
(``ratchet_migrate`` is ``ratchet_db upgrade``)."""

from __future__ import annotations

from ratchet_core.cli.db import db_group
from ratchet_core.contrib.django.clicommand import ClickCommand


class Command(ClickCommand):
    click_command = db_group
