"""SchedulerService on every store: what enqueue writes, builder options and their validation,
idempotency, bulk enqueue, and the management transitions (cancel, pause, resume, retry)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4

import pytest

from ratchet_api.errors import (
    ClassNotAllowedError,
    InvalidJobError,
    InvalidTargetError,
    JobNotFoundError,
    PayloadError,
)
from ratchet_api.model import BackoffPolicy, JobInvocation, JobPriority, JobStatus, NodeTagFilter
from ratchet_api.store.entities import JobQuery
from ratchet_api.store.protocols import JobQueryStore, JobStore
from ratchet_core.enqueue.scheduler import SchedulerService
from ratchet_core.payload.forms import decode_backoff, decode_invocation
from tests.engine import targets
from tests.engine.targets import Order


@pytest.fixture
def scheduler(engine: Any) -> SchedulerService:
    service: SchedulerService = engine.scheduler()
    return service


@pytest.fixture
def store(engine: Any) -> JobStore:
    job_store: JobStore = engine.job_store()
    return job_store


def unique_tag() -> str:
    return f"t-{uuid4().hex[:12]}"


def test_enqueue_stores_the_invocation_as_a_pending_job(
    scheduler: SchedulerService, store: JobStore
) -> None:
    orders = [Order(id=7, item="tea", price=Decimal("3.20"))]
    job_id = scheduler.enqueue(targets.total_price, orders)
    job = store.find_by_id(job_id)
    assert job is not None
    assert job.status is JobStatus.PENDING
    assert job.target == "tests.engine.targets:total_price"
    assert job.priority is JobPriority.NORMAL and job.max_retries == 3 and job.attempt == 0
    assert job.scheduled_at <= datetime.now(UTC)
    invocation = decode_invocation(job.payload, job_id)
    assert invocation.args == ([{"id": 7, "item": "tea", "price": "3.20"}],)
    assert invocation.signature == "(orders: list[Order])"


def test_schedule_with_delay_or_aware_datetime(
    scheduler: SchedulerService, store: JobStore
) -> None:
    before = datetime.now(UTC)
    delayed = store.find_by_id(scheduler.schedule(timedelta(hours=1), targets.add, 1, 2))
    assert delayed is not None
    assert delayed.scheduled_at >= before + timedelta(minutes=59)
    seconds = store.find_by_id(scheduler.schedule(90.0, targets.add, 1, 2))
    assert seconds is not None and seconds.scheduled_at >= before + timedelta(seconds=89)
    when = datetime(2031, 5, 1, 9, 0, tzinfo=UTC)
    at = store.find_by_id(scheduler.schedule(when, targets.add, 1, 2))
    assert at is not None and at.scheduled_at == when
    with pytest.raises(InvalidJobError, match=r"'at'.*naive"):
        scheduler.schedule(datetime(2031, 5, 1), targets.add, 1, 2)
    with pytest.raises(InvalidJobError, match=r"'delay'.*negative"):
        scheduler.schedule(-1, targets.add, 1, 2)


def test_builder_options_are_stored(scheduler: SchedulerService, store: JobStore) -> None:
    tag = unique_tag()
    job_id = (
        scheduler.job(targets.greet)
        .args("ada")
        .kwargs(punctuation="?")
        .priority("high")
        .tags(tag, "billing")
        .max_retries(5)
        .backoff(BackoffPolicy.exponential(2.0, maximum=60.0))
        .execution_target("gpu")
        .delay(30)
        .enqueue()
    )
    job = store.find_by_id(job_id)
    assert job is not None
    assert job.priority is JobPriority.HIGH
    assert sorted(job.tags) == sorted([tag, "billing"])
    assert job.max_retries == 5
    assert job.execution_target == "gpu"
    assert decode_backoff(job.backoff) == BackoffPolicy.exponential(2.0, maximum=60.0)
    assert dict(decode_invocation(job.payload, job_id).kwargs) == {"punctuation": "?"}
    assert job.scheduled_at > datetime.now(UTC) + timedelta(seconds=20)


@pytest.mark.parametrize(
    ("apply", "option"),
    [
        (lambda b: b.max_retries(-1), "max_retries"),
        (lambda b: b.max_retries(True), "max_retries"),
        (lambda b: b.priority(101), "priority"),
        (lambda b: b.priority(True), "priority"),
        (lambda b: b.priority("urgent"), "priority"),
        (lambda b: b.tags("x" * 129), "tags"),
        (lambda b: b.tags(""), "tags"),
        (lambda b: b.idempotency_key(""), "idempotency_key"),
        (lambda b: b.idempotency_key("k" * 256), "idempotency_key"),
        (lambda b: b.execution_target(" "), "execution_target"),
        (lambda b: b.delay(-0.5), "delay"),
        (lambda b: b.at(datetime(2030, 1, 1)), "at"),
        (lambda b: b.backoff("fast"), "backoff"),
    ],
)
def test_invalid_builder_options_are_refused_naming_the_option(
    scheduler: SchedulerService, apply: Any, option: str
) -> None:
    with pytest.raises(InvalidJobError, match=f"'{option}'"):
        apply(scheduler.job(targets.add).args(1, 2))


def test_bad_arguments_and_targets_fail_in_the_caller(scheduler: SchedulerService) -> None:
    with pytest.raises(InvalidJobError, match=r"tests\.engine\.targets:add.*missing"):
        scheduler.enqueue(targets.add, 1)
    with pytest.raises(InvalidTargetError, match="lambda"):
        scheduler.enqueue(lambda: None)
    with pytest.raises(InvalidTargetError, match="closure"):
        scheduler.enqueue(targets.make_closure(3), 1)
    with pytest.raises(ClassNotAllowedError, match=r"ratchet_api\.model\.BackoffPolicy"):
        scheduler.enqueue(targets.takes_outside_class, {"kind": "FIXED"})


def test_same_idempotency_key_yields_the_first_job(
    scheduler: SchedulerService, store: JobStore
) -> None:
    key = f"invoice-{uuid4()}"
    first = scheduler.job(targets.add).args(1, 2).idempotency_key(key).enqueue()
    second = scheduler.job(targets.add).args(3, 4).idempotency_key(key).enqueue()
    assert second == first
    stored = store.find_by_idempotency_key(key)
    assert stored is not None and stored.id == first
    assert decode_invocation(stored.payload, first).args == (1, 2)


def test_enqueue_many_writes_a_thousand_jobs_in_one_call(
    scheduler: SchedulerService, store: JobStore
) -> None:
    ids = scheduler.enqueue_many(targets.bulk_item, [(n,) for n in range(1000)])
    assert len(ids) == 1000 and len(set(ids)) == 1000
    queries = store.capability(JobQueryStore)
    if queries is not None:
        assert queries.count_jobs(JobQuery(target="tests.engine.targets:bulk_item")) == 1000
    for index in (0, 499, 999):
        job = store.find_by_id(ids[index])
        assert job is not None and job.status is JobStatus.PENDING
        assert decode_invocation(job.payload, job.id).args == (index,)
    with pytest.raises(InvalidJobError, match="item 1"):
        scheduler.enqueue_many(targets.bulk_item, [(1,), (1, 2)])
    assert scheduler.enqueue_many(targets.bulk_item, []) == []


def test_enqueue_invocation_applies_the_dispatch_checks(
    scheduler: SchedulerService, store: JobStore
) -> None:
    invocation = JobInvocation(
        module="tests.engine.targets",
        qualname="add",
        signature="(a: int, b: int)",
        args=(2, 3),
    )
    job_id = scheduler.enqueue_invocation(invocation)
    job = store.find_by_id(job_id)
    assert job is not None and decode_invocation(job.payload, job_id) == invocation
    with pytest.raises(InvalidTargetError, match="parameters changed"):
        scheduler.enqueue_invocation(
            JobInvocation(module="tests.engine.targets", qualname="add", signature="(a)")
        )
    with pytest.raises(ClassNotAllowedError, match=r"subprocess\.run"):
        scheduler.enqueue_invocation(JobInvocation(module="subprocess", qualname="run"))
    with pytest.raises(ValueError, match="argument 'orders'"):
        scheduler.enqueue_invocation(
            JobInvocation(module="tests.engine.targets", qualname="total_price", args=([1],))
        )


def test_cancel_pause_resume_transitions(scheduler: SchedulerService, store: JobStore) -> None:
    job_id = scheduler.enqueue(targets.add, 1, 2)
    assert scheduler.pause(job_id) is True
    assert store.find_by_id(job_id).status is JobStatus.PAUSED  # type: ignore[union-attr]
    assert scheduler.pause(job_id) is False
    assert scheduler.resume(job_id) is True
    assert store.find_by_id(job_id).status is JobStatus.PENDING  # type: ignore[union-attr]
    assert scheduler.resume(job_id) is False
    assert scheduler.cancel(job_id) is True
    assert store.find_by_id(job_id).status is JobStatus.CANCELLED  # type: ignore[union-attr]
    assert scheduler.cancel(job_id) is False
    missing = uuid4()
    for operation in (scheduler.cancel, scheduler.pause, scheduler.resume, scheduler.retry):
        with pytest.raises(JobNotFoundError, match=str(missing)):
            operation(missing)


def claim_own(store: JobStore, tag: str) -> Any:
    claimed = store.claim_next_batch(
        "test-node", 1, tag_filter=NodeTagFilter(required=frozenset({tag}))
    )
    assert len(claimed) == 1
    return claimed[0]


def test_retry_sends_a_dead_letter_back_and_result_reads_the_outcome(
    scheduler: SchedulerService, store: JobStore
) -> None:
    tag = unique_tag()
    failed_id = scheduler.job(targets.fail_always).args("boom").tags(tag).enqueue()
    assert scheduler.retry(failed_id) is False  # only dead letters can be retried
    running = claim_own(store, tag)
    assert store.mark_failed_terminal(failed_id, running.claim_seq, "RuntimeError: boom")
    outcome = scheduler.result(failed_id)
    assert outcome.status is JobStatus.FAILED and outcome.error == "RuntimeError: boom"
    assert scheduler.retry(failed_id) is True
    again = store.find_by_id(failed_id)
    assert again is not None and again.status is JobStatus.PENDING and again.attempt == 0

    tag = unique_tag()
    ok_id = scheduler.job(targets.add).args(2, 2).tags(tag).enqueue()
    running = claim_own(store, tag)
    assert store.mark_succeeded(ok_id, running.claim_seq, json.dumps(4))
    result = scheduler.result(ok_id)
    assert result.succeeded and result.value == 4 and result.error is None
    assert result.finished_at is not None
    with pytest.raises(JobNotFoundError):
        scheduler.result(uuid4())


def test_search_finds_jobs_by_tag(scheduler: SchedulerService, store: JobStore) -> None:
    # Every store of this repository offers JobQueryStore: losing it is a regression.
    assert store.capability(JobQueryStore) is not None, f"{type(store).__name__} lost JobQueryStore"
    tag = unique_tag()
    ids = {scheduler.job(targets.add).args(n, n).tags(tag).enqueue() for n in range(3)}
    found = scheduler.search(JobQuery(tag=tag))
    assert {job.id for job in found} == ids


def test_local_wakeup_listener_runs_for_due_jobs_only(scheduler: SchedulerService) -> None:
    calls: list[int] = []
    listener = lambda: calls.append(1)  # noqa: E731
    scheduler.add_local_wakeup_listener(listener)
    try:
        scheduler.enqueue(targets.add, 1, 2)
        assert calls == [1]
        scheduler.schedule(timedelta(hours=1), targets.add, 1, 2)
        assert calls == [1]
        scheduler.enqueue_many(targets.add, [(1, 1), (2, 2)])
        assert calls == [1, 1]
    finally:
        scheduler.remove_local_wakeup_listener(listener)


def test_job_ids_are_time_ordered(scheduler: SchedulerService) -> None:
    first = scheduler.enqueue(targets.add, 1, 2)
    second = scheduler.enqueue(targets.add, 1, 2)
    assert isinstance(first, UUID) and first.version == 7 and first < second


def test_argument_values_that_do_not_fit_the_type_hints_are_refused_at_enqueue(
    scheduler: SchedulerService,
) -> None:
    tag = unique_tag()
    with pytest.raises(InvalidJobError, match=r"tests\.engine\.targets:add: argument 'a' .* int"):
        scheduler.job(targets.add).args("abc", 2).tags(tag).enqueue()
    with pytest.raises(InvalidJobError, match=r"argument 'b' .* int"):
        scheduler.job(targets.add).kwargs(a=1, b=[3]).tags(tag).enqueue()
    not_a_shipment = {"order": {"id": 1, "item": "x", "price": "1"}, "shipped_at": "soon"}
    with pytest.raises(InvalidJobError, match=r"targets:ship: argument 'shipment'"):
        scheduler.job(targets.ship).args(not_a_shipment).tags(tag).enqueue()
    with pytest.raises(InvalidJobError, match=r"item 1: .*argument 'b' .* int"):
        scheduler.enqueue_many(targets.add, [(1, 2), (1, "x")])
    assert scheduler.search(JobQuery(tag=tag)) == []


def test_unhinted_and_any_arguments_and_fitting_values_are_accepted(
    scheduler: SchedulerService,
) -> None:
    for job_id in (
        scheduler.enqueue(targets.echo, "abc"),
        scheduler.enqueue(targets.echo_any, {"any": ["thing"]}),
        scheduler.enqueue(targets.greet, "Ann", punctuation="?"),
        scheduler.enqueue(targets.add, 1, True),  # bool is an int, as for type checkers
    ):
        assert scheduler.get(job_id).status is JobStatus.PENDING


def test_bulk_enqueue_checks_every_item_after_the_first_bound(
    scheduler: SchedulerService,
) -> None:
    # the arity of the first items is bound once; later items are still checked one by one
    with pytest.raises(InvalidJobError, match=r"item 2: .*too many"):
        scheduler.enqueue_many(targets.add, [(1, 2), (3, 4), (5, 6, 7)])
    with pytest.raises(InvalidJobError, match=r"item 1: .*missing"):
        scheduler.enqueue_many(targets.add, [(1, 2), (3,)])
    with pytest.raises(ClassNotAllowedError, match=r"ratchet_api\.model\.BackoffPolicy"):
        scheduler.enqueue_many(targets.takes_outside_class, [({"kind": "FIXED"},)] * 3)
    with pytest.raises(PayloadError, match="item 1"):
        scheduler.enqueue_many(targets.add, [(1, 2), (object(), 2)])


def test_bulk_enqueue_of_a_target_with_defaults_binds_fewer_arguments(
    scheduler: SchedulerService,
) -> None:
    ids = scheduler.enqueue_many(targets.greet, [("ada",), ("bob",), ("cy", "?")])
    assert len(ids) == 3
