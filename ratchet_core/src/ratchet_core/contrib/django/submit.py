"""Enqueue from Django code, joined to Django's transaction when the store allows it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from ratchet_api.model import JobPriority
from ratchet_core.contrib._submit import submit_job


def submit_invocation(
    fn: Callable[..., Any],
    args: Iterable[Any],
    kwargs: dict[str, Any],
    *,
    when: datetime | timedelta | float | None = None,
    priority: JobPriority | int | None = None,
    tags: Iterable[str] = (),
    max_retries: int | None = None,
    transactional: bool = True,
) -> UUID:
    """Enqueue ``fn(*args, **kwargs)``. With ``transactional`` and the store in the Django
    database it follows, the job row is written on Django's connection in the current atomic
    block (see :mod:`ratchet_core.contrib.django.transactions`); otherwise through the store's
    own connection, committed at once."""
    from ratchet_core.contrib.django import app_config, database_alias
    from ratchet_core.contrib.django.transactions import django_connection

    config = app_config()
    container = config.container()
    options: dict[str, Any] = {"priority": priority, "tags": tags, "max_retries": max_retries}
    if transactional and config.joins_django_transactions():
        with django_connection(database_alias()) as connection:
            return submit_job(container, when, fn, args, kwargs, transaction=connection, **options)
    return submit_job(container, when, fn, args, kwargs, **options)


def submit(
    when: datetime | timedelta | float | None,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> UUID:
    return submit_invocation(fn, args, kwargs, when=when)


def enqueue_on_commit(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> None:
    """Validate ``fn(*args, **kwargs)`` now and enqueue it when the current transaction of the
    store's Django database commits (at once outside ``atomic``). For a store that does not live
    in a Django database: a rollback leaves no job, but a process that dies between the commit
    and the enqueue loses it, and no id is known before the commit."""
    from django.db import transaction

    from ratchet_core.contrib.django import database_alias, get_container

    container = get_container()
    container.job_invocation_resolver().resolve(fn, list(args), dict(kwargs))

    def later() -> None:
        submit_job(container, None, fn, args, kwargs)

    transaction.on_commit(later, using=database_alias())


__all__ = ["enqueue_on_commit", "submit", "submit_invocation"]
