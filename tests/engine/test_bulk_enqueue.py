"""The bulk enqueue path builds the same jobs as one-by-one enqueues: payloads encoded in one
pass, entities copied from a validated first job, and every per-job check still applied."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest

from ratchet_api.errors import PayloadError
from ratchet_api.ids import uuid7_many
from ratchet_api.model import JobInvocation, JobPriority, JobStatus
from ratchet_api.store.entities import JobEntity
from ratchet_api.store.protocols import JobStore
from ratchet_core.enqueue._job_copies import job_copies
from ratchet_core.enqueue.scheduler import SchedulerService
from ratchet_core.payload.forms import encode_invocation, encode_invocations
from tests.engine import targets


def test_encode_invocations_writes_exactly_what_encode_invocation_writes() -> None:
    invocations = [
        JobInvocation(module="m", qualname="f", args=(1, 'é\u2028"', [1, {"a": None}])),
        JobInvocation(module="m", qualname="f"),
        JobInvocation(module="m", qualname="f", kwargs={"x": 1.5, "y": []}),
        JobInvocation(
            module="m2", qualname="C.g", static=False, signature="(a: int)", args=(True,)
        ),
        JobInvocation(module="m", qualname="f", args=(1e300, -0.0, 2**70)),
    ]
    assert encode_invocations(invocations) == [encode_invocation(i) for i in invocations]
    with pytest.raises(PayloadError, match="m:f has arguments that are not JSON values"):
        encode_invocations(
            [invocations[0], JobInvocation(module="m", qualname="f", args=(float("nan"),))]
        )


def test_job_copies_equal_evolve_of_the_template() -> None:
    now = datetime.now(UTC)
    template = JobEntity(
        priority=JobPriority.HIGH,
        target="m:f",
        payload="{}",
        scheduled_at=now + timedelta(seconds=5),
        created_at=now,
        updated_at=now,
        max_retries=7,
        tags=("a", "b"),
        idempotency_key=None,
        execution_target="gpu",
        flow_control='{"permits":2}',
    )
    ids = uuid7_many(3)
    payloads = ["p0", "p1", "p2"]
    copies = job_copies(template, ids, payloads)
    assert copies == [
        attrs.evolve(template, id=i, payload=p) for i, p in zip(ids, payloads, strict=True)
    ]
    assert all(type(copy) is JobEntity for copy in copies)
    assert [hash(c) for c in copies] == [
        hash(attrs.evolve(template, id=i, payload=p)) for i, p in zip(ids, payloads, strict=True)
    ]
    with pytest.raises(ValueError):
        job_copies(template, ids, payloads[:2])


def test_enqueue_many_stores_the_jobs_single_enqueues_store(
    scheduler: SchedulerService, store: JobStore
) -> None:
    single = store.find_by_id(scheduler.enqueue(targets.bulk_item, 41))
    ids = scheduler.enqueue_many(targets.bulk_item, [(41,), (42,), (43,)])
    many = [store.find_by_id(job_id) for job_id in ids]
    assert single is not None and all(job is not None for job in many)

    def shape(job: Any) -> JobEntity:
        return attrs.evolve(
            job,
            id=single.id,
            created_at=single.created_at,
            updated_at=single.updated_at,
            scheduled_at=single.scheduled_at,
        )  # type: ignore[no-any-return]

    assert shape(many[0]) == single
    assert [job.payload for job in many[1:]] == [
        single.payload.replace("[41]", "[42]"),
        single.payload.replace("[41]", "[43]"),
    ]
    assert {job.status for job in many} == {JobStatus.PENDING}
    assert len({job.id for job in many}) == 3


@pytest.fixture
def scheduler(engine: Any) -> SchedulerService:
    service: SchedulerService = engine.scheduler()
    return service


@pytest.fixture
def store(engine: Any) -> JobStore:
    job_store: JobStore = engine.job_store()
    return job_store


def test_enqueue_many_refuses_a_target_asking_for_a_parent_outcome(
    scheduler: SchedulerService,
) -> None:
    from ratchet_api.errors import InvalidJobError
    from tests.engine import workflow_targets

    with pytest.raises(InvalidJobError, match="has no parent"):
        scheduler.job(workflow_targets.add_one).enqueue()  # as a single enqueue refuses it
    with pytest.raises(InvalidJobError, match="has no parent"):
        scheduler.enqueue_many(workflow_targets.add_one, [(), ()])
