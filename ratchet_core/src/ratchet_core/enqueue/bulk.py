"""Bulk retry, cancel and delete of the jobs matching a :class:`JobQuery`.

Used by ``SchedulerService.retry_matching`` / ``cancel_matching`` / ``delete_matching`` and the
``ratchet jobs retry|cancel|delete`` filters. Each action narrows the query to the statuses it
applies to (retry: FAILED; cancel: the unfinished statuses; delete: every status but RUNNING, so
a job in flight is never deleted under its worker), collects the matching jobs page by page
(created no later than the start of the operation, so jobs enqueued meanwhile are left alone)
and applies the store's single-job transition to each: a job that changed status since it was
read is simply not counted. ``limit`` and ``offset`` of the query are ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from enum import Enum

import attrs

from ratchet_api.errors import UnsupportedCapabilityError
from ratchet_api.model import TERMINAL_STATUSES, JobStatus
from ratchet_api.store.entities import JobEntity, JobQuery, SortOrder
from ratchet_api.store.protocols import JobQueryStore, JobStore

PAGE = 1000


class BulkAction(Enum):
    """What a bulk operation does to each matching job."""

    RETRY = "retry"
    CANCEL = "cancel"
    DELETE = "delete"

    @property
    def applicable(self) -> frozenset[JobStatus]:
        """The statuses this action can change."""
        if self is BulkAction.RETRY:
            return frozenset({JobStatus.FAILED})
        if self is BulkAction.CANCEL:
            return frozenset(set(JobStatus) - TERMINAL_STATUSES)
        return frozenset(set(JobStatus) - {JobStatus.RUNNING})


@attrs.frozen(kw_only=True)
class BulkResult:
    """The outcome of a bulk operation: ``matched`` jobs were selected, ``changed`` of them
    were retried/cancelled/deleted (0 on a dry run)."""

    action: BulkAction
    matched: int
    changed: int
    dry_run: bool


def narrowed(action: BulkAction, query: JobQuery) -> JobQuery | None:
    """``query`` restricted to the statuses ``action`` applies to; None when none is left."""
    statuses = action.applicable
    if query.statuses is not None:
        statuses = statuses & frozenset(JobStatus(x) for x in query.statuses)
    if not statuses:
        return None
    return attrs.evolve(
        query, statuses=statuses, limit=PAGE, offset=0, order=SortOrder.OLDEST_FIRST
    )


def _pages(queries: JobQueryStore, query: JobQuery) -> Iterator[JobEntity]:
    seen: set[object] = set()
    offset = 0
    while True:
        page = queries.search_jobs(attrs.evolve(query, offset=offset))
        for job in page:
            if job.id not in seen:
                seen.add(job.id)
                yield job
        if len(page) < query.limit:
            return
        offset += len(page)


def run_bulk(
    store: JobStore,
    action: BulkAction,
    query: JobQuery,
    *,
    dry_run: bool = False,
    on_retried: Callable[[list[JobEntity]], None] | None = None,
) -> BulkResult:
    """Apply ``action`` to every job matching ``query`` (see the module docstring).
    ``on_retried`` receives the jobs that went back to the queue (to wake workers).
    ``UnsupportedCapabilityError`` when the store has no ``JobQueryStore``."""
    queries = store.capability(JobQueryStore)
    if queries is None:
        raise UnsupportedCapabilityError("JobQueryStore", f"bulk {action.value}")
    scoped = narrowed(action, query)
    if scoped is None:
        return BulkResult(action=action, matched=0, changed=0, dry_run=dry_run)
    if scoped.created_before is None:
        # jobs created after the operation started are not part of it
        scoped = attrs.evolve(scoped, created_before=store.server_now())
    if dry_run:
        return BulkResult(
            action=action, matched=queries.count_jobs(scoped), changed=0, dry_run=True
        )
    jobs = list(_pages(queries, scoped))
    changed: list[JobEntity] = []
    for job in jobs:
        if action is BulkAction.RETRY:
            done = store.retry_dead_letter(job.id)
        elif action is BulkAction.CANCEL:
            done = store.cancel_job(job.id)
        else:
            done = _delete_unless_running(store, job)
        if done:
            changed.append(job)
    if action is BulkAction.RETRY and changed and on_retried is not None:
        on_retried(changed)
    return BulkResult(action=action, matched=len(jobs), changed=len(changed), dry_run=False)


def _delete_unless_running(store: JobStore, job: JobEntity) -> bool:
    current = store.find_by_id(job.id)
    if current is None or current.status is JobStatus.RUNNING:
        return False
    return store.delete_job(job.id)


__all__ = ["BulkAction", "BulkResult", "narrowed", "run_bulk"]
