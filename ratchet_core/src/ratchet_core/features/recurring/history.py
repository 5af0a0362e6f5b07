"""A recurring definition's recent firings and misfires, read from the jobs it fired.

The sweeper keeps no history table: every slot it fires is a job tagged ``recurring:<id>`` and
keyed ``recurring:<id>@<slot>`` (due at the slot, created when fired), so the recent firings
are those jobs. A round fired later than ``recurring.misfire_grace`` (a misfire) is marked on
the job of its first slot with three write-once job properties (``JobExtensionStore``)::

    ratchet.recurring.misfire = "late"
    ratchet.recurring.missed  = "<slots that got no job in that round>"
    ratchet.recurring.policy  = "FIRE_ONCE" | "FIRE_ALL" | "SKIP"

A ``SKIP`` round fires no job; the sweeper then writes one CANCELLED job for the missed slot
(same key, so once whoever sweeps; never run) that carries the properties and says why in
``last_error``. Counting a definition's misfires is one ``count_jobs`` by tag and property.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import attrs

from ratchet_api.model import JobStatus
from ratchet_api.store.entities import JobEntity, JobQuery
from ratchet_api.store.protocols import JobExtensionStore, JobQueryStore, JobStore
from ratchet_core.features.recurring.template import run_tag

MISFIRE_PROPERTY = "ratchet.recurring.misfire"
MISSED_PROPERTY = "ratchet.recurring.missed"
POLICY_PROPERTY = "ratchet.recurring.policy"
MISFIRE_VALUE = "late"


@attrs.frozen(kw_only=True)
class Firing:
    """One fired slot: its job, when it was due and when it was fired; ``misfire`` for the
    first job of a round fired beyond the grace, ``missed`` slots of that round without a job,
    ``skipped`` for the record of a ``SKIP`` round (a CANCELLED job that never runs)."""

    job_id: str
    status: JobStatus
    due_at: datetime
    fired_at: datetime
    finished_at: datetime | None
    last_error: str | None
    misfire: bool = False
    missed: int = 0
    policy: str | None = None
    skipped: bool = False

    @property
    def late_by(self) -> timedelta:
        return max(timedelta(0), self.fired_at - self.due_at)

    def as_json(self) -> dict[str, object]:
        return {
            "id": self.job_id,
            "status": self.status.value,
            "scheduled_at": self.due_at.isoformat(),
            "fired_at": self.fired_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "late_seconds": round(self.late_by.total_seconds(), 3),
            "misfire": self.misfire,
            "missed": self.missed,
            "policy": self.policy,
            "skipped": self.skipped,
            "last_error": self.last_error,
        }


@attrs.frozen(kw_only=True)
class History:
    """``firings`` newest first; ``misfires`` counts every misfire round on record (None: the
    store keeps no job properties); ``available`` is False when the store cannot search jobs."""

    firings: tuple[Firing, ...] = ()
    misfires: int | None = None
    available: bool = True


def _firing(job: JobEntity, props: dict[str, str]) -> Firing:
    misfire = props.get(MISFIRE_PROPERTY) == MISFIRE_VALUE
    try:
        missed = int(props.get(MISSED_PROPERTY, "0"))
    except ValueError:
        missed = 0
    return Firing(
        job_id=str(job.id),
        status=job.status,
        due_at=job.scheduled_at,
        fired_at=job.created_at,
        finished_at=job.finished_at,
        last_error=job.last_error,
        misfire=misfire,
        missed=missed,
        policy=props.get(POLICY_PROPERTY),
        skipped=misfire and job.status is JobStatus.CANCELLED and job.started_at is None,
    )


def misfire_count(store: JobStore, recurring_id: str) -> int | None:
    """Misfire rounds on record for ``recurring_id`` (None: the store cannot tell)."""
    queries = store.capability(JobQueryStore)
    if queries is None or store.capability(JobExtensionStore) is None:
        return None
    return queries.count_jobs(
        JobQuery(
            tag=run_tag(recurring_id),
            properties={MISFIRE_PROPERTY: MISFIRE_VALUE},
            limit=1,
        )
    )


def history(store: JobStore, recurring_id: str, limit: int = 20) -> History:
    """The ``limit`` most recent firings of ``recurring_id`` (by due time) and its misfire count."""
    queries = store.capability(JobQueryStore)
    if queries is None:
        return History(available=False)
    jobs = queries.search_jobs(JobQuery(tag=run_tag(recurring_id), limit=limit, preview=1))
    jobs.sort(key=lambda j: j.scheduled_at, reverse=True)
    ext = store.capability(JobExtensionStore)
    firings = []
    for job in jobs:
        props = ext.get_properties_by_prefix(job.id, "ratchet.recurring.") if ext else {}
        firings.append(_firing(job, props))
    return History(firings=tuple(firings), misfires=misfire_count(store, recurring_id))


__all__ = [
    "MISFIRE_PROPERTY",
    "MISFIRE_VALUE",
    "MISSED_PROPERTY",
    "POLICY_PROPERTY",
    "Firing",
    "History",
    "history",
    "misfire_count",
]
