"""The InvocationSubmissionService converges on the builders' creation path on every store:
validation at enqueue, idempotency, tags, properties, encryption, authorization, delays, and
the job runs like any other."""

from __future__ import annotations

import base64
import os
import uuid
from datetime import timedelta
from typing import Any

import pytest
from dependency_injector import providers

from ratchet_api import InvocationSubmissionService
from ratchet_api.errors import (
    InvalidJobError,
    JobAuthorizationError,
    PayloadError,
    TargetNotImportableError,
    UnsupportedCapabilityError,
)
from ratchet_api.model import JobInvocation, JobStatus
from ratchet_api.priority import Priority
from ratchet_api.spi import JobAuthorizationPolicy
from ratchet_core.authorization import TenantJobAuthorizationPolicy
from ratchet_core.envelope import is_envelope
from tests.engine.conftest import build_container, migrate

ECHO = JobInvocation(
    module="tests.engine.secret_targets",
    qualname="echo_secret",
    signature="(marker: str)",
    args=("inv",),
)


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


def test_authorization_and_missing_features_apply(sqlite_url: str) -> None:
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
    for call in (
        lambda: service.enqueue_invocation_batch("b"),
        lambda: service.invocation_streaming_batch("s"),
        lambda: service.invocation_condition(ECHO),
    ):
        with pytest.raises(UnsupportedCapabilityError):
            call()
