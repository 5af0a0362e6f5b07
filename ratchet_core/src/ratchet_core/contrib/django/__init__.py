"""Ratchet for Django: an installable app (``INSTALLED_APPS += ["ratchet_core.contrib.django"]``).

* settings: ``RATCHET = {"store": {"url": ...}, "security": {"allowed_packages": "myapp"}}``
  (nested or dotted keys); without ``store.url`` the store is ``DATABASES["default"]``;
* :func:`enqueue` / :func:`schedule`: write the job in the view's ``transaction.atomic()`` block
  (rollback: no job; commit: the job runs);
* :func:`get_scheduler` / :func:`get_container` / :func:`get_project_container`: the project's
  scheduler, Ratchet container and own container (``RATCHET_CONTAINER``; ``RATCHET_WIRE`` lists
  the modules wired to it for ``@inject``);
* management commands ``ratchet_worker``, ``ratchet_migrate``, ``ratchet_db``, ``ratchet_jobs``,
  ``ratchet_enqueue``, ``ratchet_spi``;
* system checks ``ratchet.E001``... for a bad configuration;
* a Tasks backend: ``TASKS = {"default": {"BACKEND": "ratchet_core.contrib.django.tasks.RatchetTaskBackend"}}``.

See ``docs/django.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

# First: a `manage.py ratchet_worker` process takes its signals from here on.
from ratchet_core.contrib.django import early as _early  # noqa: F401  # isort: skip

if TYPE_CHECKING:
    from ratchet_api.scheduler import JobScheduler
    from ratchet_core.contrib.django.apps import RatchetAppConfig
    from ratchet_core.runtime.container import RatchetDynamicContainer


def app_config() -> RatchetAppConfig:
    """The installed Ratchet app; ``LookupError`` with the fix when it is not installed."""
    from django.apps import apps

    from ratchet_core.contrib.django.apps import RatchetAppConfig

    try:
        config = apps.get_app_config("ratchet")
    except LookupError:
        raise LookupError(
            "Ratchet's Django app is not installed: add 'ratchet_core.contrib.django' to "
            "INSTALLED_APPS"
        ) from None
    if not isinstance(config, RatchetAppConfig):
        raise LookupError(f"the app labelled 'ratchet' is {type(config).__name__}, not Ratchet's")
    return config


def get_container() -> RatchetDynamicContainer:
    """The project's Ratchet container, configured from ``settings.RATCHET`` and built."""
    return app_config().container()


def get_project_container() -> Any:
    """The project's own container, the one ``settings.RATCHET_CONTAINER`` names, as Ratchet's
    Django app built and configured it (its nested Ratchet container follows ``DATABASES`` and
    ``RATCHET``); the Ratchet container itself without that setting. Use it instead of calling
    your container factory again inside Django: a container you create yourself knows nothing
    of Django's settings. Modules in ``settings.RATCHET_WIRE`` are wired to it, so views can
    take ``Provide[ProjectContainer.ratchet.scheduler]``."""
    return app_config().project_container()


def get_scheduler() -> JobScheduler:
    """The project's scheduler (``get_container().scheduler()``)."""
    scheduler: JobScheduler = get_container().scheduler()
    return scheduler


def database_alias() -> str:
    """The ``DATABASES`` alias the store follows (setting ``django.database``)."""
    from ratchet_core.contrib.django.conf import DATABASE

    alias: str = get_container().settings().get(DATABASE)
    return alias


def enqueue(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> UUID:
    """Enqueue ``fn(*args, **kwargs)`` as part of the current Django transaction.

    With the store in the Django database (the default), the job row is written on Django's
    connection: inside ``transaction.atomic()`` it commits or rolls back with the view's own
    rows; outside one it commits at once. With a store elsewhere the enqueue is deferred to
    ``transaction.on_commit`` (rollback: no job; a crash right after commit loses it) and the
    returned id is the id the job will have. Invalid targets or arguments raise here.
    """
    return _submit(None, fn, args, kwargs)


def schedule(
    at_or_delay: datetime | timedelta | float, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
) -> UUID:
    """Like :func:`enqueue`, due at an aware datetime or after a delay (seconds or timedelta)."""
    return _submit(at_or_delay, fn, args, kwargs)


def _submit(
    when: datetime | timedelta | float | None,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> UUID:
    from ratchet_core.contrib.django.submit import submit

    return submit(when, fn, args, kwargs)


__all__ = [
    "app_config",
    "database_alias",
    "enqueue",
    "get_container",
    "get_project_container",
    "get_scheduler",
    "schedule",
]
