"""The autoscaling queries of docs/scaling.md run as written against the real schema.

Each ```sql block marked ``<!-- query: NAME BACKEND -->`` in the doc is read from the file and
run on a migrated store holding jobs of every kind: only PENDING jobs that are due count, per
execution target, with the age of the oldest one. On PostgreSQL also through PgBouncer.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from ratchet_api.model import JobStatus
from ratchet_api.store import JobEntity
from ratchet_store_sql import SqlJobStore
from tests.conftest import PGBOUNCER

DOC = Path(__file__).resolve().parents[2] / "docs" / "scaling.md"
_BLOCK = re.compile(r"<!-- query: (\S+) (\S+) -->\s*```sql\n(.*?)```", re.S)


def documented(name: str, backend: str) -> str:
    """The SQL of the doc's block ``name`` for ``backend`` (postgresql or mysql)."""
    for found, dialect, sql in _BLOCK.findall(DOC.read_text(encoding="utf-8")):
        if (found, dialect) == (name, backend):
            return str(sql)
    raise AssertionError(f"docs/scaling.md has no `<!-- query: {name} {backend} -->` block")


@pytest.fixture(params=["postgresql", "mariadb", PGBOUNCER])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_due_jobs_queries_count_only_due_pending_jobs_per_target(store: SqlJobStore) -> None:
    dialect = "postgresql" if store.engine.dialect.name == "postgresql" else "mysql"
    now = store.server_now()
    hour = timedelta(hours=1)
    # a RUNNING job (claimed), the oldest of all: never counted
    store.bulk_insert([JobEntity(scheduled_at=now - 5 * hour)])
    assert len(store.claim_next_batch("node-a", 10)) == 1
    rows = [
        # due: 3 without a target (the oldest an hour overdue), 2 for "gpu"
        JobEntity(scheduled_at=now - hour),
        JobEntity(scheduled_at=now - timedelta(minutes=1)),
        JobEntity(scheduled_at=now),
        JobEntity(scheduled_at=now - 2 * hour, execution_target="gpu"),
        JobEntity(scheduled_at=now - timedelta(seconds=5), execution_target="gpu"),
        # not due, not pending: never counted
        JobEntity(scheduled_at=now + hour),
        JobEntity(scheduled_at=now + hour, execution_target="gpu"),
        JobEntity(scheduled_at=now - 3 * hour, status=JobStatus.SUCCEEDED),
        JobEntity(scheduled_at=now - 3 * hour, status=JobStatus.PAUSED, execution_target="gpu"),
    ]
    store.bulk_insert(rows)

    with store.engine.connect() as conn:
        total = conn.execute(sa.text(documented("due-jobs", dialect))).scalar_one()
        per_target = {
            target: (count, float(age))
            for target, count, age in conn.execute(
                sa.text(documented("due-jobs-by-target", dialect))
            )
        }
    assert total == 5
    assert set(per_target) == {"", "gpu"}
    assert per_target[""][0] == 3 and per_target["gpu"][0] == 2
    # the oldest due job's age, on the database's clock (read a moment after `now`)
    assert 3600 <= per_target[""][1] < 3600 + 600
    assert 7200 <= per_target["gpu"][1] < 7200 + 600
