"""The InvocationSubmissionService converges on the builders' creation path on every store:
validation at enqueue, idempotency, tags, properties, encryption, authorization, delays, and
the job runs like any other; batches, streaming batches and branch conditions of prepared
invocations run with real workers."""

from __future__ import annotations

import base64
import os
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from dependency_injector import providers

from ratchet_api import InvocationSubmissionService
from ratchet_api.errors import (
    BatchChunkError,
    ClassNotAllowedError,
    InvalidJobError,
    JobAuthorizationError,
    PayloadError,
    TargetNotImportableError,
)
from ratchet_api.model import JobInvocation, JobStatus
from ratchet_api.priority import Priority
from ratchet_api.spi import JobAuthorizationPolicy
from ratchet_api.store import BatchStatus, BatchStore
from ratchet_core.defaults.authorization import TenantJobAuthorizationPolicy
from ratchet_core.features.streaming import streaming_batch_id
from ratchet_core.payload.envelope import is_envelope
from tests.engine import batch_targets as bt
from tests.engine.conftest import build_container, migrate

ECHO = JobInvocation(
    module="tests.engine.secret_targets",
    qualname="echo_secret",
    signature="(marker: str)",
    args=("inv",),
)


def child(log: str, index: int) -> JobInvocation:
    """A prepared invocation of ``batch_targets.child(log, index)``."""
    return JobInvocation(module=bt.__name__, qualname="child", args=(log, index))


def callback(log: str, label: str) -> JobInvocation:
    return JobInvocation(module=bt.__name__, qualname="callback", args=(log, label))


def workflow(qualname: str, *args: Any) -> JobInvocation:
    return JobInvocation(module="tests.engine.workflow_targets", qualname=qualname, args=args)


def wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)
    return value


def find_batch(container: Any, batch_id: uuid.UUID) -> Any:
    batches = container.job_store().capability(BatchStore)
    assert batches is not None
    return batches.find_batch(batch_id)


def make(store_url: str, **settings: str) -> Any:
    container = build_container(store_url, **settings)
    migrate(container.job_store())
    return container


def test_submitted_invocations_take_the_builders_path(store_url: str, make_worker: Any) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    container = make(store_url, **{"encryption.keys": f"k1:{key}", "encryption.mode": "opt_in"})
    service = container.invocation_submission_service()
    assert isinstance(service, InvocationSubmissionService)
    idem = f"inv-{uuid.uuid4()}"
    first = service.enqueue_invocation(ECHO).tags("inv").idempotency_key(idem).encrypted().enqueue()
    again = service.enqueue_invocation(ECHO).idempotency_key(idem).enqueue()
    assert again == first
    later = service.schedule_invocation(timedelta(hours=1), ECHO).property("k", "v").enqueue()
    store = container.job_store()
    stored = store.find_by_id(first)
    assert stored is not None and is_envelope(stored.payload) and stored.tags == ("inv",)
    scheduled = store.find_by_id(later)
    assert scheduled is not None and scheduled.scheduled_at > stored.created_at + timedelta(
        minutes=59
    )
    make_worker(container).run_until_idle(20)
    assert container.scheduler().result(first).value == "inv-result"
    assert container.scheduler().get(later).status is JobStatus.PENDING
    detail = container.scheduler().detail(later)
    assert detail is not None and detail.properties == {"k": "v"}


def test_bad_invocations_fail_at_enqueue_and_arguments_cannot_be_replaced(sqlite_url: str) -> None:
    service = make(sqlite_url).invocation_submission_service()
    missing = JobInvocation(module="tests.engine.nowhere", qualname="f")
    with pytest.raises(TargetNotImportableError):
        service.enqueue_invocation(missing).enqueue()
    wrong = JobInvocation(
        module=ECHO.module, qualname=ECHO.qualname, signature=ECHO.signature, args=(1, 2)
    )
    with pytest.raises(PayloadError, match="too many positional arguments"):
        service.enqueue_invocation(wrong).enqueue()
    with pytest.raises(InvalidJobError, match="prepared JobInvocation"):
        service.enqueue_invocation(ECHO).args("other")
    with pytest.raises(InvalidJobError, match="expected a JobInvocation"):
        service.enqueue_invocation("tests.engine.secret_targets:echo_secret")  # type: ignore[arg-type]


def test_authorization_applies_to_invocations_and_batch_children(sqlite_url: str) -> None:
    container = build_container(sqlite_url)
    container.alternatives.register(
        JobAuthorizationPolicy,
        providers.Object(TenantJobAuthorizationPolicy({"acme": ["tests.engine"]})),
        priority=Priority.APPLICATION,
    )
    container.build()
    migrate(container.job_store())
    service = container.invocation_submission_service()
    with pytest.raises(JobAuthorizationError):
        service.enqueue_invocation(ECHO).enqueue()
    assert service.enqueue_invocation(ECHO).property("tenant", "acme").enqueue()
    # batch children pass check_create like any job: refused before anything is written
    batch = service.enqueue_invocation_batch("no-tenant").add(ECHO)
    with pytest.raises(JobAuthorizationError):
        batch.enqueue()
    assert find_batch(container, batch.id) is None


def test_invocation_batch_completes_and_fires_its_callback(
    engine: Any, make_worker: Any, tmp_path: Path
) -> None:
    log = str(tmp_path / "calls.log")
    service = engine.invocation_submission_service()
    batch = service.enqueue_invocation_batch("invocations").tags("inv-batch")
    batch.add(child(log, 0)).add_invocations(child(log, i) for i in range(1, 6))
    batch.on_success(callback(log, "success")).on_failure(callback(log, "failure"))
    batch_id = batch.enqueue()
    found = find_batch(engine, batch_id)
    assert (found.status, found.total) == (BatchStatus.SEALED, 6)
    make_worker(engine).start()
    wait_for(lambda: "callback success" in bt.lines(log), 60, "the on_success callback")
    wait_for(lambda: find_batch(engine, batch_id).status is BatchStatus.COMPLETED, 10, "COMPLETED")
    done = find_batch(engine, batch_id)
    assert (done.succeeded, done.failed) == (6, 0)
    lines = bt.lines(log)
    assert sorted(x for x in lines if x.startswith("child ")) == [f"child {i}" for i in range(6)]
    assert lines.count("callback success") == 1 and "callback failure" not in lines


def test_invocation_streaming_batch_expands_every_item(
    engine: Any, make_worker: Any, tmp_path: Path
) -> None:
    log = str(tmp_path / "calls.log")
    service = engine.invocation_submission_service()
    name = f"inv-stream-{tmp_path.name}"
    batch_id = (
        service.invocation_streaming_batch(name)
        .items(range(25), lambda i: child(log, i))
        .chunk_size(10)
        .on_complete(callback(log, "complete"))
        .enqueue()
    )
    assert batch_id == streaming_batch_id(name)
    found = find_batch(engine, batch_id)
    assert (found.status, found.total) == (BatchStatus.SEALED, 25)
    make_worker(engine).start()
    wait_for(lambda: "callback complete" in bt.lines(log), 60, "the on_complete callback")
    assert len({x for x in bt.lines(log) if x.startswith("child ")}) == 25


def test_branch_on_an_invocation_condition_takes_the_right_side(
    engine: Any, make_worker: Any
) -> None:
    service = engine.invocation_submission_service()
    builders = {}
    for n in (4, 2):  # double(4) = 8 > 5: big; double(2) = 4: small
        builder = service.enqueue_invocation(workflow("double", n))
        builder.branch(
            service.invocation_condition(workflow("is_big", 5)),
            if_true=workflow("label", "big"),
            if_false=workflow("label", "small"),
        )
        builder.enqueue()
        builders[n] = builder
    make_worker(engine).run_until_idle(timeout=30)
    store = engine.job_store()
    for n, taken in ((4, "big"), (2, "small")):
        _, if_true, if_false = (store.find_by_id(i) for i in builders[n].job_ids)
        ran, skipped = (if_true, if_false) if taken == "big" else (if_false, if_true)
        assert ran is not None and ran.status is JobStatus.SUCCEEDED
        assert ran.result == f'"{taken}"'
        assert skipped is not None and skipped.status is JobStatus.CANCELLED


def test_bad_invocations_in_batches_and_conditions_are_refused_at_enqueue(
    sqlite_url: str, tmp_path: Path
) -> None:
    container = make(sqlite_url)
    service = container.invocation_submission_service()
    log = str(tmp_path / "calls.log")
    not_allowed = JobInvocation(module="subprocess", qualname="run", args=(["id"],))
    too_many = JobInvocation(module=bt.__name__, qualname="child", args=(log, 1, 2))
    missing = JobInvocation(module="tests.engine.nowhere", qualname="f")

    refused = service.enqueue_invocation_batch("refused").add(child(log, 0)).add(not_allowed)
    with pytest.raises(ClassNotAllowedError, match=r"subprocess\.run"):
        refused.enqueue()
    wrong = service.enqueue_invocation_batch("wrong").add(too_many)
    with pytest.raises(PayloadError, match=r"batch 'wrong'.*too many positional arguments"):
        wrong.enqueue()
    bad_callback = service.enqueue_invocation_batch("cb").add(child(log, 0)).on_success(missing)
    with pytest.raises(TargetNotImportableError, match="batch 'cb' on_success callback"):
        bad_callback.enqueue()
    for batch in (refused, wrong, bad_callback):
        assert find_batch(container, batch.id) is None  # nothing written
    with pytest.raises(InvalidJobError, match="prepared JobInvocation cannot be changed"):
        service.enqueue_invocation_batch("args").add(child(log, 0), "extra")
    with pytest.raises(InvalidJobError, match="item 1 must be a JobInvocation"):
        service.enqueue_invocation_batch("mixed").add_invocations([child(log, 0), "nope"])

    stream = service.invocation_streaming_batch("stream-wrong")
    with pytest.raises(InvalidJobError, match=r"call \.items\(items, factory\)"):
        stream.enqueue()
    stream = service.invocation_streaming_batch("stream-wrong").items([1], lambda i: too_many)
    with pytest.raises(BatchChunkError, match="too many positional arguments") as caught:
        stream.enqueue()
    assert isinstance(caught.value.__cause__, PayloadError)
    tuples = service.invocation_streaming_batch("stream-tuple")
    with pytest.raises(BatchChunkError, match="takes a JobInvocation per item"):
        tuples.items([1], lambda i: (bt.child, log, i)).enqueue()

    with pytest.raises(ClassNotAllowedError, match=r"subprocess\.run"):
        service.invocation_condition(not_allowed)
    with pytest.raises(InvalidJobError, match="cannot be imported"):
        service.invocation_condition(missing)
