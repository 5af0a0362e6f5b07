"""Shared by the Django test modules: the store backend fixture and the in-process worker."""

from __future__ import annotations

from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test.utils import override_settings

from tests import servers


def ratchet_settings(**extra: Any) -> dict[str, Any]:
    return {**settings.RATCHET, **extra}


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """The store follows the SQLite ``default`` database or the PostgreSQL ``pg`` one."""
    if request.param == "postgresql":
        if "pg" not in settings.DATABASES:
            servers.unavailable("PostgreSQL", "the Django project has no 'pg' database")
        alias = "pg"
    else:
        alias = "default"
    with override_settings(RATCHET=ratchet_settings(django={"database": alias})):
        call_command("ratchet_migrate", stdout=StringIO())
        yield alias


def burst(*options: str) -> str:
    """Run ``manage.py ratchet_worker --burst`` in this process; its summary line (stderr)."""
    err = StringIO()
    call_command(
        "ratchet_worker",
        "--burst",
        "--burst-timeout",
        "20",
        *options,
        stdout=StringIO(),
        stderr=err,
    )
    return err.getvalue()
