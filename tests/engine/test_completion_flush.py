"""The completion flusher keeps every job accounted for whatever the store raises."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import pytest

from ratchet_api.model import JobStatus
from ratchet_api.store.entities import Completion, ExecutionRecord
from ratchet_api.store.protocols import JobAuditStore
from ratchet_core.defaults.metrics import NoOpMetricsCollector
from ratchet_core.worker.completion import CompletionBatcher, PendingCompletion
from tests.conftest import PGBOUNCER, backend_url
from tests.engine import targets
from tests.engine.conftest import build_container, migrate


class _BatchWriteBug:
    """A real store whose ``mark_succeeded_many`` raises an error that is not a StoreError (an
    untranslated driver error or a bug of a third-party store); everything else is the store."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def mark_succeeded_many(self, completions: Sequence[Completion]) -> set[UUID]:
        raise ValueError("untranslated driver error")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def test_a_batch_write_failing_with_a_non_store_error_still_writes_and_reports_the_jobs(
    sqlite_url: str,
) -> None:
    container = build_container(sqlite_url)
    store = container.job_store()
    migrate(store)
    scheduler = container.scheduler()
    ids = [scheduler.enqueue(targets.add, i, 1) for i in range(3)]
    claimed = store.claim_next_batch("node-a", 3)
    assert {j.id for j in claimed} == set(ids)
    flushed: list[tuple[list[UUID], set[UUID]]] = []
    done = threading.Event()

    def on_flushed(
        batch: Sequence[PendingCompletion], applied: Sequence[PendingCompletion]
    ) -> None:
        flushed.append(
            ([i.completion.job_id for i in batch], {i.completion.job_id for i in applied})
        )
        if sum(len(b) for b, _ in flushed) == len(ids):
            done.set()

    batcher = CompletionBatcher(
        _BatchWriteBug(store),
        interval=0.01,
        batch_size=10,
        on_flushed=on_flushed,
        metrics=NoOpMetricsCollector(),
    )
    try:
        for job in claimed:
            batcher.add(
                PendingCompletion(
                    Completion(job_id=job.id, claim_seq=job.claim_seq, result="1"), None
                )
            )
        assert done.wait(10), "the flush callback was never called: the jobs stay owned"
    finally:
        batcher.close()
    assert set().union(*(applied for _, applied in flushed)) == set(ids)
    for job_id in ids:
        stored = store.find_by_id(job_id)
        assert stored is not None and JobStatus(stored.status) is JobStatus.SUCCEEDED
    store.close()


@pytest.mark.parametrize("backend", ["sqlite", PGBOUNCER])
def test_only_the_latest_claim_of_a_job_in_a_batch_is_counted_and_audited_as_succeeded(
    request: pytest.FixtureRequest, backend: str
) -> None:
    """The job was recovered as ours while it ran and ran again: both attempts succeed in one
    batch. Only the attempt whose fenced write applied is a success; the other is recorded as
    superseded (issue 17), whatever order they reached the batch in. Also behind PgBouncer
    (transaction pooling), where the batched write and the audit rows use no prepared
    statement."""
    container = build_container(backend_url(request, backend))
    store = container.job_store()
    migrate(store)
    audit = store.capability(JobAuditStore)
    assert audit is not None
    job_id = container.scheduler().enqueue(targets.add, 1, 1)
    (first,) = store.claim_next_batch("node-a", 10)
    assert store.release_claim(first.id, first.claim_seq)
    (second,) = store.claim_next_batch("node-a", 10)
    assert second.claim_seq > first.claim_seq
    flushed: list[tuple[Sequence[PendingCompletion], Sequence[PendingCompletion]]] = []
    batcher = CompletionBatcher(
        store,
        interval=60,
        batch_size=10,
        on_flushed=lambda batch, applied: flushed.append((batch, applied)),
        metrics=NoOpMetricsCollector(),
        audit=audit,
    )

    def pending(claim: Any, result: str) -> PendingCompletion:
        record = ExecutionRecord(
            job_id=job_id,
            attempt=claim.attempt,
            node_id="node-a",
            status=JobStatus.SUCCEEDED,
            started_at=datetime.now(UTC),
        )
        return PendingCompletion(
            Completion(job_id=job_id, claim_seq=claim.claim_seq, result=result), record
        )

    newer, older = pending(second, '"newer"'), pending(first, '"older"')
    batcher.add(newer)
    batcher.add(older)  # last in the batch: a last-wins dedup would keep the stale claim
    batcher.close()
    ((_batch, applied),) = flushed
    assert list(applied) == [newer]
    stored = store.find_by_id(job_id)
    assert stored is not None and stored.status is JobStatus.SUCCEEDED
    assert stored.result == '"newer"'
    records = audit.find_executions_by_job_id(job_id)
    assert sorted((r.id == newer.record.id, r.superseded) for r in records) == [
        (False, True),
        (True, False),
    ]
    store.close()
