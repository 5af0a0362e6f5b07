"""One line per failed task attempt on a Django worker.

A Django task that raises is reported by Django's own ``django_tasks`` logger (``Task id=...
path=... state=FAILED`` with the traceback, as Django's workers do: the task signals are sent
for each attempt). :func:`reported_by_django_tasks` keeps ``ratchet.worker`` from reporting
the same attempt again while ``manage.py ratchet_worker`` runs; plain Ratchet jobs, and Django
tasks that never ran (refused at dispatch), are still reported by ``ratchet.worker``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

TASK_TARGETS = frozenset(
    {
        "ratchet_core.contrib.django.tasks:execute_django_task",
        "ratchet_core.contrib.django.tasks:run_django_task",
    }
)
"""The job targets behind Django tasks (``run_django_task``: tasks of earlier versions)."""


class DjangoTaskAttemptFilter(logging.Filter):
    """Drops ``ratchet.worker``'s record of a failed attempt of a Django task (the record's
    arguments name the job's target, its message an attempt): the ``django_tasks`` logger
    reported that attempt already."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or "attempt" not in str(record.msg):
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        return not any(isinstance(arg, str) and arg in TASK_TARGETS for arg in args)


@contextlib.contextmanager
def reported_by_django_tasks(logger_name: str = "ratchet.worker") -> Iterator[None]:
    """While open, ``logger_name`` leaves failed Django task attempts to ``django_tasks``."""
    logger = logging.getLogger(logger_name)
    attempt_filter = DjangoTaskAttemptFilter()
    logger.addFilter(attempt_filter)
    try:
        yield
    finally:
        logger.removeFilter(attempt_filter)


__all__ = ["TASK_TARGETS", "DjangoTaskAttemptFilter", "reported_by_django_tasks"]
