"""The fair claim order (``FairClaimStore``): priority first, then round robin across the
fairness keys of equal priority, then due time and id.

A job's *rank* is its position within its ``(priority, fairness_key)`` group ordered by
``scheduled_at`` then id (1 for the group's first job); jobs without a key form one group.
A keyed job's rank also counts the RUNNING jobs of its key, so a claim of a single job goes to
the key that runs the fewest rather than to the oldest job. Claiming by ``(-priority, rank,
scheduled_at, id)`` takes one job of every key before a second job of any key, so a key
holding most of the backlog gets one turn in each round. Over jobs of one group only (every
job unkeyed, say) the order is the plain claim order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from uuid import UUID

from ratchet_api.store.entities import JobEntity


def plain_claim_key(job: JobEntity) -> tuple[int, datetime, UUID]:
    """The plain claim order: priority (highest first), ``scheduled_at``, id."""
    return (-int(job.priority), job.scheduled_at, job.id)


def fair_claim_order(
    jobs: Iterable[JobEntity], running: Mapping[str, int] | None = None
) -> list[JobEntity]:
    """``jobs`` in the fair claim order, ranks computed among ``jobs``: what a store with
    ``FairClaimStore`` picks among due jobs (``running``: the RUNNING jobs per fairness key,
    added to the rank of that key's jobs), and the order a claim returns its jobs in
    (without ``running``)."""
    ordered = sorted(jobs, key=plain_claim_key)
    seen: dict[tuple[int, str | None], int] = {}
    ranked: list[tuple[int, int, datetime, UUID, JobEntity]] = []
    for job in ordered:
        group = (int(job.priority), job.fairness_key)
        rank = seen.get(group, 0) + 1
        seen[group] = rank
        if running and job.fairness_key is not None:
            rank += running.get(job.fairness_key, 0)
        ranked.append((-int(job.priority), rank, job.scheduled_at, job.id, job))
    ranked.sort(key=lambda r: r[:4])
    return [r[4] for r in ranked]


__all__ = ["fair_claim_order", "plain_claim_key"]
