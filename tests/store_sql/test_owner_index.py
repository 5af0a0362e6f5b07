"""The ``(owner, status)`` index (partial on PostgreSQL and SQLite since migration 0018: only
jobs with an owner have an entry) still serves the queries that look jobs up by owner: a
node's running jobs reset (``owner = ?``) and the orphan reset (``owner IN (...)``). Each is
checked by ``EXPLAIN`` on every SQL backend, next to what the store does with them."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from ratchet_api.model import JobStatus
from ratchet_api.store import JobEntity
from ratchet_store_sql import SqlJobStore
from ratchet_store_sql.schema import jobs as J

INDEX = "ix_ratchet_jobs_owner_status"


def _plan(store: SqlJobStore, stmt: sa.Select[tuple[object]]) -> str:
    engine = store.engine
    sql = str(stmt.compile(engine, compile_kwargs={"literal_binds": True}))
    name = engine.dialect.name
    prefix = "EXPLAIN QUERY PLAN " if name == "sqlite" else "EXPLAIN "
    with engine.connect() as conn:
        if name == "postgresql":
            conn.execute(sa.text("ANALYZE ratchet_jobs"))
        else:
            conn.execute(sa.text("ANALYZE" if name == "sqlite" else "ANALYZE TABLE ratchet_jobs"))
        return "\n".join(
            " ".join(str(v) for v in row) for row in conn.execute(sa.text(prefix + sql))
        )


@pytest.mark.parametrize(
    "where",
    [
        pytest.param(lambda: J.c.owner == "node-a", id="owner-equals"),
        pytest.param(lambda: J.c.owner.in_(["node-a", "node-b"]), id="owner-in"),
    ],
)
def test_jobs_looked_up_by_owner_read_the_owner_index(store: SqlJobStore, where: object) -> None:
    now = store.server_now()
    # many jobs without an owner (enqueued, not in the partial index) and a few claimed ones
    store.bulk_insert([JobEntity(scheduled_at=now + timedelta(hours=1)) for _ in range(3000)])
    store.bulk_insert([JobEntity(scheduled_at=now - timedelta(seconds=1)) for _ in range(3)])
    assert len(store.claim_next_batch("node-a", 10)) == 3
    assert callable(where)
    stmt = sa.select(J.c.id).where(where(), J.c.status == JobStatus.RUNNING.value)
    plan = _plan(store, stmt)
    assert INDEX in plan, plan
    # what the store does with it: the node's running jobs go back to PENDING, owner cleared
    assert store.reset_running_jobs("node-a") == 3
    with store.engine.connect() as conn:
        owned = conn.execute(sa.select(sa.func.count()).where(J.c.owner.is_not(None)))
        assert owned.scalar_one() == 0
