"""The Django app: add ``"ratchet_core.contrib.django"`` to ``INSTALLED_APPS``."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import post_migrate

from ratchet_core.runtime.container import RatchetDynamicContainer


class RatchetAppConfig(AppConfig):
    """Holds the project's Ratchet container (built on first use, rebuilt when the settings it
    was built from change: ``override_settings`` in tests, the test database's name)."""

    name = "ratchet_core.contrib.django"
    label = "ratchet"
    verbose_name = "Ratchet background jobs"
    default = True

    def __init__(self, app_name: str, app_module: Any) -> None:
        super().__init__(app_name, app_module)
        self._lock = threading.RLock()
        self._container: RatchetDynamicContainer | None = None
        self._project: Any = None
        self._fingerprint: object = None
        self._joinable = False

    def ready(self) -> None:
        from ratchet_core.contrib.django import checks  # noqa: F401 - registers the checks
        from ratchet_core.contrib.django.migrate import migrate_after_django
        from ratchet_core.contrib.django.wiring import WIRE_SETTING

        post_migrate.connect(migrate_after_django, sender=self)
        if getattr(settings, WIRE_SETTING, None):
            # Views are wired before the first request; a bad configuration is left to the
            # system checks (ratchet.E00x), which report it better than a failed start.
            with contextlib.suppress(Exception):
                self.container()

    def container(self) -> RatchetDynamicContainer:
        """The built Ratchet container of this project. Raises ``RatchetError`` subclasses for a
        bad configuration (the system checks report the same problems at startup)."""
        from ratchet_core.contrib.django.wiring import build_container, fingerprint

        current = fingerprint()
        with self._lock:
            if self._container is None or current != self._fingerprint:
                old = self._container
                self._container, self._joinable, self._project = build_container()
                self._fingerprint = current
                if old is not None:
                    _close_quietly(old)
            return self._container

    def project_container(self) -> Any:
        """The application's container built from ``RATCHET_CONTAINER`` (configured from
        Django's settings, its Ratchet container following ``DATABASES``), or the Ratchet
        container without that setting."""
        self.container()
        return self._project

    def joins_django_transactions(self) -> bool:
        """True when the store lives in the Django database it follows, so enqueue can write
        through Django's own connection (see :mod:`ratchet_core.contrib.django.transactions`)."""
        self.container()
        return self._joinable


def _close_quietly(container: RatchetDynamicContainer) -> None:
    # The replaced container's store holds a connection pool; creating a never-used store just
    # to close it is cheap (engines connect lazily).
    with contextlib.suppress(Exception):  # closing a replaced container must not break a caller
        container.job_store().close()


__all__ = ["RatchetAppConfig"]
