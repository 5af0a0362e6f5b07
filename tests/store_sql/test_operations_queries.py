"""The KEDA PostgreSQL query of docs/operations.md runs as written against the real schema.

The ```sql block marked ``<!-- keda-query: due-jobs-for-label -->`` is read from the doc and
run on a migrated PostgreSQL store holding jobs of every kind: only due PENDING jobs without an
execution target count. The ScaledObject's ``query: >-`` block in the same doc must fold to the
same text, so what users paste into KEDA is what this test ran. The query's plan reads the
PENDING rows through an index, never the whole table.
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

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
_SQL = re.compile(r"<!-- keda-query: (\S+) -->\s*```sql\n(.*?)```", re.S)
_SCALED = re.compile(r"<!-- keda-scaledobject: postgresql -->\s*```yaml\n(.*?)```", re.S)


def documented_sql(name: str) -> str:
    for found, sql in _SQL.findall(DOC.read_text(encoding="utf-8")):
        if found == name:
            return str(sql)
    raise AssertionError(f"docs/operations.md has no `<!-- keda-query: {name} -->` block")


def scaled_object_query() -> str:
    """The ScaledObject's ``query: >-`` folded as YAML folds it (lines joined by spaces)."""
    found = _SCALED.search(DOC.read_text(encoding="utf-8"))
    assert found, "docs/operations.md has no PostgreSQL ScaledObject block"
    lines = found.group(1).splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "query: >-")
    indent = len(lines[start + 1]) - len(lines[start + 1].lstrip())
    body = []
    for line in lines[start + 1 :]:
        if len(line) - len(line.lstrip()) < indent or not line.strip():
            break
        body.append(line.strip())
    return " ".join(body)


def _words(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(params=["postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_scaled_object_uses_the_tested_query() -> None:
    assert scaled_object_query() == _words(documented_sql("due-jobs-for-label"))


def test_keda_query_counts_due_pending_jobs_without_a_label(store: SqlJobStore) -> None:
    now = store.server_now()
    hour = timedelta(hours=1)
    store.bulk_insert([JobEntity(scheduled_at=now - 5 * hour)])
    assert len(store.claim_next_batch("node-a", 10)) == 1  # RUNNING: not counted
    store.bulk_insert(
        [
            JobEntity(scheduled_at=now - hour),
            JobEntity(scheduled_at=now - timedelta(seconds=1), priority=100),
            JobEntity(scheduled_at=now),
            JobEntity(scheduled_at=now + hour),  # not due yet
            JobEntity(scheduled_at=now - hour, execution_target="gpu"),  # another pool
            JobEntity(scheduled_at=now - hour, status=JobStatus.PAUSED),
            JobEntity(scheduled_at=now - hour, status=JobStatus.SUCCEEDED),
            JobEntity(scheduled_at=now - hour, status=JobStatus.FAILED),
        ]
    )
    sql = documented_sql("due-jobs-for-label")
    with store.engine.connect() as conn:
        assert conn.execute(sa.text(sql)).scalar_one() == 3
        gpu = sql.replace("= ''", "= 'gpu'")
        assert gpu != sql
        assert conn.execute(sa.text(gpu)).scalar_one() == 1
        # the folded text KEDA receives runs the same
        assert conn.execute(sa.text(scaled_object_query())).scalar_one() == 3


def test_keda_query_reads_an_index_of_pending_jobs(store: SqlJobStore) -> None:
    now = store.server_now()
    store.bulk_insert(
        [JobEntity(scheduled_at=now, status=JobStatus.SUCCEEDED) for _ in range(2000)]
        + [JobEntity(scheduled_at=now) for _ in range(20)]
    )
    with store.engine.connect() as conn:
        conn.execute(sa.text("ANALYZE ratchet_jobs"))
        plan = "\n".join(
            row[0]
            for row in conn.execute(sa.text("EXPLAIN " + documented_sql("due-jobs-for-label")))
        )
    assert "Seq Scan on ratchet_jobs" not in plan, plan
    assert "ix_ratchet_jobs_" in plan, plan
