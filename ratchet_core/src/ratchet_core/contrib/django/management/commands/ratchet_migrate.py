"""``manage.py ratchet_migrate [revision]``: create or upgrade Ratchet's tables."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ratchet_api.errors import RatchetError


class Command(BaseCommand):
    help = "Create or upgrade Ratchet's tables in the store (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("revision", nargs="?", default="head", help="default: head")

    def handle(self, *args: Any, **options: Any) -> None:
        from ratchet_core.contrib.django import get_container
        from ratchet_core.contrib.django.migrate import upgrade_schema

        try:
            migrated = upgrade_schema(get_container(), options["revision"])
        except RatchetError as exc:
            raise CommandError(str(exc)) from exc
        if migrated:
            self.stdout.write(f"Ratchet schema is at {options['revision']}")
        else:
            self.stdout.write("this store manages no schema: nothing to do")
