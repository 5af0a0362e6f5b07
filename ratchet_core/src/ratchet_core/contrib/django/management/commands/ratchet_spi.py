"""``manage.py ratchet_spi [--json]``: every SPI with its active implementation, priority and
origin, as configured for this project (``RATCHET``, ``RATCHET_CONTAINER``)."""

from __future__ import annotations

import json
from typing import Any

import attrs
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ratchet_api.errors import RatchetError


class Command(BaseCommand):
    help = "List every Ratchet SPI with its active implementation, priority and origin."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print JSON records")

    def handle(self, *args: Any, **options: Any) -> None:
        from ratchet_core.contrib.django import get_container

        try:
            rows = get_container().describe_spis()
        except RatchetError as exc:
            raise CommandError(str(exc)) from exc
        if options["json"]:
            self.stdout.write(json.dumps([attrs.asdict(r) for r in rows], indent=2))
            return
        width = max(len(r.spi) for r in rows)
        for row in rows:
            self.stdout.write(
                f"{row.spi:<{width}}  {row.implementation}  "
                f"priority={row.priority} origin={row.origin} scope={row.scope}"
            )
