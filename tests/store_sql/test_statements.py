"""The hot paths run the statements they should: the claim uses its index, bulk inserts and
batched completions are a few statements, not one per job."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from ratchet_api.model import JobStatus
from ratchet_api.store import Completion, JobEntity
from ratchet_store_sql import SqlJobStore


@contextmanager
def statements(engine: sa.Engine) -> Iterator[list[tuple[str, Any, bool]]]:
    """Every statement the store sends. On PostgreSQL the hot single statements go straight
    on the psycopg connection, past SQLAlchemy's events: there they are counted at the driver's
    cursor, which every statement goes through."""
    seen: list[tuple[str, Any, bool]] = []
    if engine.dialect.name == "postgresql":
        import psycopg

        real = psycopg.Cursor.execute

        def counted(cursor: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
            text = query if isinstance(query, str) else str(query)
            seen.append((text, params, False))
            return real(cursor, query, params, **kwargs)

        psycopg.Cursor.execute = counted  # type: ignore[method-assign]
        try:
            yield seen
        finally:
            psycopg.Cursor.execute = real  # type: ignore[method-assign]
        return

    def record(_c: Any, _cur: Any, sql: str, params: Any, _ctx: Any, many: bool) -> None:
        seen.append((sql, params, many))

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def _dml(seen: list[tuple[str, Any, bool]]) -> list[tuple[str, Any, bool]]:
    return [
        s
        for s in seen
        if s[0].lstrip().split()[0].upper() in {"INSERT", "UPDATE", "SELECT", "WITH"}
    ]


def test_bulk_insert_of_1000_jobs_uses_multi_row_statements(store: SqlJobStore) -> None:
    batch = [JobEntity(tags=("bulk", f"t{i % 7}")) for i in range(1000)]
    with statements(store.engine) as seen:
        assert store.bulk_insert(batch) == 1000
    inserts = [s for s in _dml(seen) if s[0].lstrip().upper().startswith("INSERT")]
    if store.engine.dialect.name == "postgresql":
        # jobs and tags go with COPY on the transaction's connection, no INSERT at all
        assert inserts == [], [s[0][:60] for s in inserts]
    else:
        assert len(inserts) <= 4, f"{len(inserts)} INSERT executions for 1000 jobs"
        assert all(many or "VALUES" in sql.upper() for sql, _, many in inserts)
    with store.engine.connect() as conn:
        count = sa.select(sa.func.count()).select_from(sa.table("ratchet_job_tags"))
        assert conn.execute(count).scalar() == 2000
    assert store.find_tags(batch[500].id) == sorted(batch[500].tags)
    assert store.find_by_id(batch[999].id) == batch[999]


def test_claim_and_batched_completion_take_constant_statements(store: SqlJobStore) -> None:
    store.bulk_insert([JobEntity() for _ in range(100)])
    with statements(store.engine) as seen:
        claimed = store.claim_next_batch("n", 100)
        applied = store.mark_succeeded_many(
            [Completion(job_id=j.id, claim_seq=j.claim_seq, result="ok") for j in claimed]
        )
    assert len(claimed) == 100 and applied == {j.id for j in claimed}
    # claim (+ one tag query) and completion: at most 3 statements each, whatever the batch size
    assert len(_dml(seen)) <= 6, [s[0][:60] for s in _dml(seen)]
    done = store.find_by_id(claimed[0].id)
    assert done is not None and done.status is JobStatus.SUCCEEDED and done.result == "ok"


def test_stale_completion_in_a_batch_is_left_out(store: SqlJobStore) -> None:
    store.bulk_insert([JobEntity() for _ in range(3)])
    a, b, c = store.claim_next_batch("n", 3)
    applied = store.mark_succeeded_many(
        [
            Completion(job_id=a.id, claim_seq=a.claim_seq, result="1"),
            Completion(job_id=b.id, claim_seq=b.claim_seq + 1, result="2"),  # stale fence
            Completion(job_id=c.id, claim_seq=c.claim_seq, result="3"),
        ]
    )
    assert applied == {a.id, c.id}
    b_now = store.find_by_id(b.id)
    assert b_now is not None and b_now.status is JobStatus.RUNNING and b_now.result is None
    c_now = store.find_by_id(c.id)
    assert c_now is not None and c_now.result == "3"


def test_postgresql_claim_query_uses_the_claim_index(store: SqlJobStore, backend: str) -> None:
    if backend != "postgresql":
        pytest.skip("EXPLAIN plans are checked on PostgreSQL only")
    store.bulk_insert([JobEntity() for _ in range(3000)])
    done = store.claim_next_batch("n", 2000)
    store.mark_succeeded_many([Completion(job_id=j.id, claim_seq=j.claim_seq) for j in done])
    with store.engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE ratchet_jobs")
        conn.commit()
    with statements(store.engine) as seen:
        store.claim_next_batch("n", 10)
    claim_sql, params, _ = next(s for s in seen if "SKIP LOCKED" in s[0])
    with store.engine.connect() as conn:
        conn.exec_driver_sql("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in conn.exec_driver_sql("EXPLAIN " + claim_sql, params))
        conn.rollback()
    assert "ix_ratchet_jobs_claim" in plan, plan


def test_batched_success_stores_a_result_with_a_nul_whole(store: SqlJobStore, backend: str) -> None:
    # SQLite's json_each path read results back with json_extract, which ends a text at an
    # escaped NUL: 'a\x00b' was stored as 'a' (the single write and the other backends keep it)
    if backend == "postgresql":
        pytest.skip("PostgreSQL refuses a NUL in text (StoreDataError), in every write")
    store.bulk_insert([JobEntity() for _ in range(2)])
    a, b = store.claim_next_batch("n", 2)
    results = {a.id: "a\x00b", b.id: "plain"}
    applied = store.mark_succeeded_many(
        [Completion(job_id=j.id, claim_seq=j.claim_seq, result=results[j.id]) for j in (a, b)]
    )
    assert applied == {a.id, b.id}
    for job_id, result in results.items():
        done = store.find_by_id(job_id)
        assert done is not None and done.result == result
