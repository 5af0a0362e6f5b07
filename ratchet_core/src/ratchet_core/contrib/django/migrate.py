"""Ratchet's schema in a Django project: ``manage.py ratchet_migrate``, and ``manage.py migrate``
of the database the store follows (setting ``django.migrate``, default on)."""

from __future__ import annotations

from typing import Any

from ratchet_api.errors import RatchetError
from ratchet_api.store.protocols import SchemaManager
from ratchet_core.runtime.container import RatchetDynamicContainer


def upgrade_schema(container: RatchetDynamicContainer, revision: str = "head") -> bool:
    """Migrate the store's schema to ``revision``; False when the store manages no schema."""
    manager = container.job_store().capability(SchemaManager)
    if manager is None:
        return False
    manager.upgrade(revision)
    return True


def migrate_after_django(using: str = "default", **_: Any) -> None:
    """``post_migrate`` receiver: after Django migrated database ``using``, upgrade Ratchet's
    tables when the store lives in that database."""
    from ratchet_core.contrib.django import app_config
    from ratchet_core.contrib.django.conf import DATABASE, MIGRATE_WITH_DJANGO

    config = app_config()
    try:
        container = config.container()
        settings = container.settings()
        if not settings.get(MIGRATE_WITH_DJANGO) or settings.get(DATABASE) != using:
            return
        if not config.joins_django_transactions():
            return  # the store is elsewhere: `manage.py ratchet_migrate` migrates it
    except RatchetError:
        return  # misconfigured: the system checks report it; migrate must not hide that
    upgrade_schema(container)


__all__ = ["migrate_after_django", "upgrade_schema"]
