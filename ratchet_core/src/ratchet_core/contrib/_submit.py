"""Shared by the integrations: build and enqueue one job on a container's scheduler."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from ratchet_api.model import JobPriority
from ratchet_api.scheduler import JobScheduler
from ratchet_core.runtime.container import RatchetDynamicContainer


def submit_job(
    container: RatchetDynamicContainer,
    when: datetime | timedelta | float | None,
    fn: Callable[..., Any],
    args: Iterable[Any],
    kwargs: dict[str, Any],
    *,
    transaction: object | None = None,
    priority: JobPriority | int | None = None,
    tags: Iterable[str] = (),
    max_retries: int | None = None,
) -> UUID:
    """Enqueue ``fn(*args, **kwargs)`` through the container's scheduler builder: due at
    ``when`` (aware datetime, or delay as timedelta/seconds; None: now), written inside
    ``transaction`` when given. Validation errors are raised here."""
    scheduler: JobScheduler = container.scheduler()
    builder = scheduler.job(fn).args(*args).kwargs(**kwargs)
    if isinstance(when, datetime):
        builder.at(when)
    elif when is not None:
        builder.delay(when)
    if priority is not None:
        builder.priority(priority)
    tag_list = tuple(tags)
    if tag_list:
        builder.tags(*tag_list)
    if max_retries is not None:
        builder.max_retries(max_retries)
    if transaction is not None:
        builder.transaction(transaction)
    return builder.enqueue()


__all__ = ["submit_job"]
