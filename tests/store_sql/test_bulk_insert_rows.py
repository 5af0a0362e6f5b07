"""``bulk_insert`` writes every field of every job, also when a column is set in only some of
the jobs (PostgreSQL's COPY leaves out the columns that are empty in every row) and whatever
the rows' columns hold; ``job_values`` (the COPY row) holds what ``job_to_row`` holds."""

from __future__ import annotations

import operator
from datetime import UTC, datetime, timedelta
from uuid import uuid4

import attrs
import pytest

from ratchet_api.errors import StoreDataError
from ratchet_api.model import JobPriority, JobStatus, JobType
from ratchet_api.store import JobEntity
from ratchet_store_sql import SqlJobStore
from ratchet_store_sql._convert import JOB_FIELDS, job_to_row, job_values


def _at(seconds: int) -> datetime:
    return datetime(2026, 12, 3, 10, 0, 0, 123000, tzinfo=UTC) + timedelta(seconds=seconds)


def _sparse_jobs() -> list[JobEntity]:
    plain = JobEntity(
        target="m:f", payload='{"a":1}', scheduled_at=_at(0), created_at=_at(0), updated_at=_at(0)
    )
    return [
        plain,
        attrs.evolve(
            plain,
            id=uuid4(),
            status=JobStatus.PAUSED,
            priority=JobPriority.HIGH,
            job_type=list(JobType)[-1],
            backoff='{"v":1}',
            execution_target="gpu",
            tags=("x",),
            result="r",
            last_error="e",
            parent_id=uuid4(),
            signal_key="s",
            signal_deadline=_at(60),
            signal_payload="p",
            resource_key="res",
            recurring_name="nightly",
            workflow='{"w":1}',
            flow_control='{"permits":1}',
            idempotency_key="key-1",
            max_retries=9,
        ),
        attrs.evolve(
            plain,
            id=uuid4(),
            priority=-7,
            owner="node",
            started_at=_at(5),
            heartbeat_at=_at(6),
            attempt=2,
            claim_seq=3,
            status=JobStatus.RUNNING,
        ),
        attrs.evolve(plain, id=uuid4()),
    ]


def test_bulk_insert_keeps_every_field_of_jobs_with_sparse_columns(store: SqlJobStore) -> None:
    jobs = _sparse_jobs()
    assert store.bulk_insert(jobs) == len(jobs)
    for job in jobs:
        assert store.find_by_id(job.id) == job


def test_bulk_insert_of_jobs_with_only_empty_optional_columns(store: SqlJobStore) -> None:
    jobs = [attrs.evolve(_sparse_jobs()[0], id=uuid4()) for _ in range(3)]
    assert store.bulk_insert(jobs) == 3
    assert [store.find_by_id(job.id) for job in jobs] == jobs


def test_job_values_hold_the_row_of_job_to_row_in_column_order() -> None:
    every_column = operator.itemgetter(*JOB_FIELDS)
    for job in _sparse_jobs():
        assert job_values(job) == every_column(job_to_row(job))
    naive = _sparse_jobs()[0]
    object.__setattr__(naive, "created_at", datetime(2026, 1, 1))  # past the entity check
    with pytest.raises(StoreDataError, match="created_at"):
        job_values(naive)
