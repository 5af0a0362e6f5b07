"""PostgreSQL's fair claim (``FairClaimStore``) as one statement: one round trip, where the
portable fair claim (``base.fair_candidates``, then the UPDATE) takes four.

The statement, built once per filter and kept with the node, the limit and the number to
mark started as parameters::

    WITH RECURSIVE fair_keys       -- the keys of PENDING jobs, one index probe per key
         running                   -- RUNNING jobs per key
         candidates                -- per key (LATERAL) and for the unkeyed group: the first
                                   -- `limit` due jobs in claim order, ranked in their
                                   -- (priority, key) group, plus the key's RUNNING jobs
         picked                    -- the best `limit` of them still PENDING, in fair order,
                                   -- FOR UPDATE SKIP LOCKED
    UPDATE ratchet_jobs ... WHERE id IN picked RETURNING *, tags

Each per-key read is a short range of ``ix_ratchet_jobs_fair_claim`` (``fairness_key,
priority DESC, scheduled_at, id``, partial on PENDING): the status is written as a literal so
that a prepared (generic) plan still matches the partial index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from ratchet_api.model import NodeTagFilter
from ratchet_store_sql._dialects.base import (
    PENDING,
    RUNNING,
    J,
    T,
    claim_filter,
    claim_order,
    claim_values,
)

_PENDING: sa.ColumnElement[str] = sa.literal_column(f"'{PENDING}'", sa.String())
_RUNNING: sa.ColumnElement[str] = sa.literal_column(f"'{RUNNING}'", sa.String())


def _keys() -> Any:
    """The fairness keys of PENDING jobs: a loose index scan (a recursive CTE of one index
    probe per key)."""
    first = J.alias("first_key")
    start = sa.select(
        sa.select(first.c.fairness_key)
        .where(first.c.status == _PENDING, first.c.fairness_key.is_not(None))
        .order_by(first.c.fairness_key)
        .limit(1)
        .scalar_subquery()
        .label("k")
    ).cte("fair_keys", recursive=True)
    following = J.alias("next_key")
    step = sa.select(
        sa.select(following.c.fairness_key)
        .where(following.c.status == _PENDING, following.c.fairness_key > start.c.k)
        .order_by(following.c.fairness_key)
        .limit(1)
        .scalar_subquery()
    ).where(start.c.k.is_not(None))
    return start.union_all(step)


def fair_claim_statement(
    now: sa.ColumnElement[Any],
    execution_targets: Sequence[str] | None,
    tag_filter: NodeTagFilter | None,
    *,
    with_tags: bool,
    marking: bool,
    commit_conditions: Sequence[sa.ColumnElement[bool]] = (),
) -> Any:
    """The fair claim as one ``UPDATE ... RETURNING`` (parameters ``_claim_node``,
    ``_claim_limit`` and, when ``marking``, ``_claim_start``): the same order as
    ``base.fair_candidates`` ranks in Python (priority, rank, due time, id; a job's rank is
    its position among its key's first due jobs of its priority plus the key's RUNNING jobs).
    ``commit_conditions``: the dialect's ``claim_commit_conditions``."""
    limit = sa.bindparam("_claim_limit", type_=sa.Integer())
    # claim_filter's first condition is the status, here written as a literal
    where = [J.c.status == _PENDING, *claim_filter(now, execution_targets, tag_filter)[1:]]
    keys = _keys()
    live = keys.alias("live_keys")
    running = (
        sa.select(J.c.fairness_key.label("k"), sa.func.count().label("n"))
        .where(J.c.status == _RUNNING, J.c.heartbeat_at.is_not(None), J.c.fairness_key.is_not(None))
        .group_by(J.c.fairness_key)
        .cte("running")
    )
    columns = (J.c.id, J.c.priority, J.c.scheduled_at)
    head = (
        sa.select(*columns)
        .where(*where, J.c.fairness_key == live.c.k)
        .order_by(*claim_order())
        .limit(limit)
        .lateral("head")
    )
    in_group = sa.func.row_number().over(
        partition_by=(live.c.k, head.c.priority), order_by=(head.c.scheduled_at, head.c.id)
    )
    keyed = (
        sa.select(
            head.c.id,
            head.c.priority,
            head.c.scheduled_at,
            (in_group + sa.func.coalesce(running.c.n, 0)).label("rank"),
        )
        .select_from(live.join(head, sa.true()).outerjoin(running, running.c.k == live.c.k))
        .where(live.c.k.is_not(None))
    )
    unkeyed_head = (
        sa.select(*columns)
        .where(*where, J.c.fairness_key.is_(None))
        .order_by(*claim_order())
        .limit(limit)
        .subquery("unkeyed")
    )
    unkeyed = sa.select(
        unkeyed_head.c.id,
        unkeyed_head.c.priority,
        unkeyed_head.c.scheduled_at,
        sa.func.row_number()
        .over(
            partition_by=unkeyed_head.c.priority,
            order_by=(unkeyed_head.c.scheduled_at, unkeyed_head.c.id),
        )
        .label("rank"),
    )
    # the best 2 x limit candidates (enough for a claimer that finds some taken): a row count
    # the planner knows, so that it reads them by primary key (with the keys' CTE estimated
    # at 100 rows it hashed every PENDING row instead, 35 ms behind a drained backlog)
    ranked = sa.union_all(keyed, unkeyed).subquery("ranked")
    candidates = (
        sa.select(ranked)
        .order_by(ranked.c.priority.desc(), ranked.c.rank, ranked.c.scheduled_at, ranked.c.id)
        .limit(limit * 2)
        .cte("candidates")
    )
    row = J.alias("picked_row")
    fair_order = (
        candidates.c.priority.desc(),
        candidates.c.rank,
        candidates.c.scheduled_at,
        candidates.c.id,
    )
    picked = (
        sa.select(row.c.id, candidates.c.priority, candidates.c.rank, candidates.c.scheduled_at)
        .select_from(candidates.join(row, row.c.id == candidates.c.id))
        .where(row.c.status == _PENDING)
        .order_by(*fair_order)
        .limit(limit)
        .with_for_update(skip_locked=True, of=row)
        .cte("picked")
    )
    values = claim_values(sa.bindparam("_claim_node", type_=J.c.owner.type))
    if marking:
        first = (
            sa.select(picked.c.id)
            .order_by(picked.c.priority.desc(), picked.c.rank, picked.c.scheduled_at, picked.c.id)
            .limit(sa.bindparam("_claim_start", type_=sa.Integer()))
        )
        values["dispatched_at"] = sa.case((J.c.id.in_(first), now), else_=sa.null())
    returned: list[Any] = list(J.c)
    if with_tags:
        returned.append(
            sa.select(sa.func.array_agg(T.c.tag))
            .where(T.c.job_id == J.c.id)
            .scalar_subquery()
            .label("_tags")
        )
    return (
        sa.update(J)
        .where(J.c.id.in_(sa.select(picked.c.id)), *commit_conditions)
        .values(started_at=now, heartbeat_at=now, updated_at=now, **values)
        .returning(*returned)
    )


__all__ = ["fair_claim_statement"]
