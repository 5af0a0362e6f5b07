"""Workflows end to end on every store with a real worker (threads): chains with results
passed on, both sides of a branch, success/failure callbacks, cancellation of the steps of a
cancelled or dead-lettered job, declaration errors."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

from ratchet_api.errors import ClassNotAllowedError, InvalidJobError, InvalidTargetError
from ratchet_api.model import JobInvocation, JobStatus, JobType
from ratchet_api.store.entities import JobEntity
from ratchet_api.workflow import Step, equals, one_of, predicate
from tests.engine import workflow_targets as t


def job(container: Any, job_id: Any) -> JobEntity:
    found = container.job_store().find_by_id(job_id)
    assert found is not None
    return found


def run(container: Any, make_worker: Callable[..., Any]) -> None:
    worker = make_worker(container)
    stats = worker.run_until_idle(timeout=30)
    assert stats.idle, "the worker did not become idle"


def test_three_step_chain_passes_each_result_on(
    engine: Any, make_worker: Callable[..., Any]
) -> None:
    scheduler = engine.scheduler()
    builder = scheduler.job(t.double).args(20).then(t.add_one).then(t.describe, prefix="total")
    root = builder.enqueue()
    first, second, third = builder.job_ids
    assert first == root
    assert job(engine, second).status is JobStatus.WAITING
    assert job(engine, second).parent_id == root
    assert job(engine, third).parent_id == second
    assert job(engine, second).job_type is JobType.WORKFLOW_STEP
    run(engine, make_worker)
    assert [job(engine, i).status for i in builder.job_ids] == [JobStatus.SUCCEEDED] * 3
    assert job(engine, second).result == "41"
    assert job(engine, third).result == '"total=41"'


def test_branch_runs_the_matching_side_and_cancels_the_other(
    engine: Any, make_worker: Callable[..., Any]
) -> None:
    scheduler = engine.scheduler()
    equal = scheduler.job(t.double).args(5)
    equal.branch(equals(10), if_true=Step(t.label, "ten"), if_false=Step(t.label, "other"))
    equal.enqueue()
    big = scheduler.job(t.double).args(2)
    big.branch(
        predicate(t.is_big, 100), if_true=Step(t.label, "big"), if_false=Step(t.label, "small")
    )
    big.enqueue()
    member = scheduler.job(t.double).args(3)
    member.branch(one_of(1, 2, 6), if_true=Step(t.label, "in"), if_false=Step(t.label, "out"))
    member.enqueue()
    run(engine, make_worker)
    for builder, taken in ((equal, 1), (big, 2), (member, 1)):
        _, yes, no = builder.job_ids
        ran, skipped = (yes, no) if taken == 1 else (no, yes)
        assert job(engine, ran).status is JobStatus.SUCCEEDED
        dropped = job(engine, skipped)
        assert dropped.status is JobStatus.CANCELLED
        assert dropped.last_error is not None and "branch not taken" in dropped.last_error
    assert job(engine, equal.job_ids[1]).result == '"ten"'
    assert job(engine, big.job_ids[2]).result == '"small"'


def test_failure_callback_gets_the_sanitized_error_and_success_callback_is_cancelled(
    engine: Any, make_worker: Callable[..., Any]
) -> None:
    scheduler = engine.scheduler()
    # callbacks attach to the current step: here the root, declared before `then`
    failing = scheduler.job(t.explode).args("disk full").max_retries(0)
    failing.on_success(t.label, "not needed").on_failure(t.report_error, tag="alert")
    failing.then(t.label, "never").then(t.label, "never either")
    failing.enqueue()
    ok = scheduler.job(t.double).args(4)
    ok.on_success(t.report_success).on_failure(t.report_error, tag="x")
    ok.enqueue()
    run(engine, make_worker)
    root, success_cb, failure_cb, step, last = failing.job_ids
    assert job(engine, root).status is JobStatus.FAILED
    alert = job(engine, failure_cb)
    assert alert.status is JobStatus.SUCCEEDED, alert.last_error
    assert alert.job_type is JobType.CALLBACK
    assert "alert: RuntimeError: boom: disk full" in (alert.result or "")
    assert "hunter2" not in (alert.result or ""), "the callback gets the sanitized error"
    assert job(engine, success_cb).status is JobStatus.CANCELLED
    for skipped in (step, last):
        cancelled = job(engine, skipped)
        assert cancelled.status is JobStatus.CANCELLED
        assert "parent job" in (cancelled.last_error or "")
    assert "failed" in (job(engine, step).last_error or "")
    assert "cancelled" in (job(engine, last).last_error or "")
    _, on_ok, on_fail = ok.job_ids
    assert job(engine, on_ok).result == '"ok 8"'
    assert job(engine, on_fail).status is JobStatus.CANCELLED


def test_invocation_condition_and_invocation_steps(
    engine: Any, make_worker: Callable[..., Any]
) -> None:
    scheduler = engine.scheduler()
    big = JobInvocation(
        module="tests.engine.workflow_targets", qualname="is_big", signature="", args=(5,)
    )
    condition = scheduler.invocation_condition(big)
    step = JobInvocation(module="tests.engine.workflow_targets", qualname="label", args=("big",))
    builder = scheduler.invocation_job(
        JobInvocation(module="tests.engine.workflow_targets", qualname="double", args=(4,))
    )
    builder.branch(condition, if_true=step)
    builder.enqueue()
    run(engine, make_worker)
    assert job(engine, builder.job_ids[1]).result == '"big"'
    with pytest.raises(InvalidJobError, match="cannot be imported"):
        scheduler.invocation_condition(
            JobInvocation(module="tests.engine.nowhere", qualname="f", args=())
        )


def test_cancelling_a_parent_cancels_its_chain_with_the_reason(engine: Any) -> None:
    scheduler = engine.scheduler()
    builder = scheduler.job(t.double).args(1).delay(3600).then(t.add_one).then(t.add_one)
    root = builder.enqueue()
    assert scheduler.cancel(root) is True
    for child in builder.job_ids[1:]:
        cancelled = job(engine, child)
        assert cancelled.status is JobStatus.CANCELLED
        assert "was cancelled" in (cancelled.last_error or "")


def test_parent_result_on_a_root_job_is_refused_at_enqueue(engine: Any) -> None:
    scheduler = engine.scheduler()
    with pytest.raises(InvalidJobError, match="has no parent"):
        scheduler.job(t.add_one).then(t.label, "x").enqueue()
    with pytest.raises(InvalidJobError, match="has no parent"):
        scheduler.enqueue(t.add_one)
    with pytest.raises(InvalidJobError, match="supplied by the worker"):
        scheduler.job(t.double).args(1).then(t.add_one, value=3).enqueue()


def test_bad_workflow_declarations_fail_at_declaration(engine: Any) -> None:
    scheduler = engine.scheduler()

    def local(result: Any) -> bool:
        return True

    with pytest.raises(InvalidTargetError):
        scheduler.job(t.double).args(1).then(lambda: None)
    with pytest.raises(InvalidTargetError):
        scheduler.job(t.double).args(1).branch(predicate(local), if_true=t.label)
    with pytest.raises(ClassNotAllowedError):
        scheduler.job(t.double).args(1).branch(predicate(os.path.isabs), if_true=t.label)
    branched = scheduler.job(t.double).args(1).branch(equals(2), if_true=Step(t.label, "a"))
    with pytest.raises(InvalidJobError, match="ends the chain"):
        branched.then(t.label, "b")
    with pytest.raises(InvalidJobError, match="if_true, if_false"):
        scheduler.job(t.double).args(1).branch(equals(2))
    with pytest.raises(InvalidJobError, match="already waits"):
        scheduler.job(t.double).args(1).await_signal("k").await_signal("k2")
    with pytest.raises(InvalidJobError, match="on_timeout"):
        scheduler.job(t.double).args(1).await_signal("k", on_timeout="explode")


def test_a_workflow_enqueued_in_a_rolled_back_transaction_leaves_nothing(
    sql_store_url: str,
) -> None:
    import sqlalchemy as sa

    from tests.engine.conftest import build_container, migrate

    container = build_container(sql_store_url)
    store = container.job_store()
    migrate(store)
    app_engine = sa.create_engine(sql_store_url)
    scheduler = container.scheduler()
    try:
        with app_engine.connect() as conn:
            conn.begin()
            builder = scheduler.job(t.double).args(1).then(t.add_one).transaction(conn)
            builder.on_failure(t.report_error, tag="x")
            builder.enqueue()
            joined = store.joined(conn)
            assert all(joined.find_by_id(i) is not None for i in builder.job_ids)
            conn.rollback()
        assert all(store.find_by_id(i) is None for i in builder.job_ids)
        with app_engine.connect() as conn:
            conn.begin()
            kept = scheduler.job(t.double).args(1).then(t.add_one).transaction(conn)
            kept.enqueue()
            conn.commit()
        assert [store.find_by_id(i).status for i in kept.job_ids] == [
            JobStatus.PENDING,
            JobStatus.WAITING,
        ]
    finally:
        app_engine.dispose()
        store.close()


def test_a_failing_callback_counts_callback_failed(
    engine: Any, make_worker: Callable[..., Any]
) -> None:
    from tests.engine.test_signals import recorded

    metrics = recorded(engine)
    scheduler = engine.scheduler()
    builder = scheduler.job(t.double).args(1).max_retries(0)
    builder.on_success(t.explode, "in the callback")
    builder.enqueue()
    run(engine, make_worker)
    callback = builder.job_ids[1]
    assert job(engine, callback).status is JobStatus.FAILED
    assert metrics.names(callback) == ["callback_failed"]
    assert metrics.names(builder.job_ids[0]) == []
