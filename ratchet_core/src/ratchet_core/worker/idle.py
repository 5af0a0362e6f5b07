"""Idleness of a worker, for ``Worker.run_until_idle`` (and ``ratchet worker --burst``)."""

from __future__ import annotations

import time
from datetime import timedelta

from ratchet_api.model import JobStatus
from ratchet_api.store.entities import JobQuery
from ratchet_core.worker.parts import Parts


def is_idle(p: Parts, deadline: float, horizon: float | None = None) -> bool:
    """One round of ``Worker.run_until_idle`` (until ``deadline``, ``time.monotonic()``): True
    when nothing is claimed, unwritten or being settled, two polls that started after this
    moment found nothing, and no job this worker put back is due before ``horizon`` (default
    ``deadline``)."""
    if not p.quiet():
        time.sleep(0.005)
        return False
    # Nothing in flight: idle once a poll that started after this moment finds nothing. The
    # first empty poll counted may have been under way already; the poller runs one poll at a
    # time, so the second started after the first ended. It is asked for as soon as the first
    # is counted: an idle poller would otherwise wait its backed-off interval (up to
    # worker.poll_max_interval) before polling again.
    polls = p.producer.empty_polls
    p.producer.request_poll()
    asked_again = False
    while time.monotonic() < deadline:
        if not p.quiet():
            return False
        done = p.producer.empty_polls - polls
        if done >= 2:
            break
        if done == 1 and not asked_again:
            p.producer.request_poll()
            asked_again = True
        time.sleep(0.002)
    else:
        return False
    due_soon = next_due(p, deadline if horizon is None else horizon)
    if due_soon is not None:
        time.sleep(min(max(0.0, due_soon), 0.05))
        return False
    return True


def next_due(p: Parts, horizon: float) -> float | None:
    """Seconds until the earliest job due before ``horizon`` (``time.monotonic()``) that this
    worker put back (a retry, or a deferral by flow control or an open circuit), or None."""
    query = p.query
    if query is None:
        return None
    try:
        pending = query.search_jobs(JobQuery(statuses=frozenset({JobStatus.PENDING}), limit=1000))
    except Exception:  # noqa: BLE001 - idleness is then judged by claims only
        return None
    now = p.now()
    until = now + timedelta(seconds=max(0.0, horizon - time.monotonic()))
    deferred = p.deferred_ids()
    due = [
        j.scheduled_at
        for j in pending
        if (j.attempt > 0 or j.id in deferred) and j.scheduled_at <= until
    ]
    if not due:
        return None
    return max(0.0, (min(due) - now).total_seconds())


__all__ = ["is_idle", "next_due"]
