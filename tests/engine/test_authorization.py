"""JobAuthorizationPolicy on every store: a refused create raises ``JobAuthorizationError`` and
stores nothing (also for ``enqueue_many``), an allowed job runs, and a job refused at dispatch
is dead-lettered without running."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from dependency_injector import providers

from ratchet_api.errors import JobAuthorizationError
from ratchet_api.model import JobStatus
from ratchet_api.priority import Priority
from ratchet_api.spi import JobAuthorizationPolicy
from ratchet_api.store.entities import JobQuery
from ratchet_core.defaults.authorization import TenantJobAuthorizationPolicy
from tests.engine import secret_targets, targets
from tests.engine.conftest import build_container, migrate

POLICY = TenantJobAuthorizationPolicy(
    {"acme": ["tests.engine.secret_targets"], "globex": ["globex"]}, blocked_tags=["frozen"]
)


def guarded(store_url: str) -> Any:
    container = build_container(store_url)
    container.alternatives.register(
        JobAuthorizationPolicy, providers.Object(POLICY), priority=Priority.APPLICATION
    )
    container.build()
    migrate(container.job_store())
    return container


def tagged(container: Any, tag: str) -> list[Any]:
    return container.scheduler().search(JobQuery(tag=tag, limit=100))


def test_refused_creates_raise_and_store_nothing(store_url: str) -> None:
    container = guarded(store_url)
    scheduler = container.scheduler()
    tag = f"auth-{uuid.uuid4().hex[:8]}"
    with pytest.raises(JobAuthorizationError, match="has no 'tenant' property"):
        scheduler.job(secret_targets.echo_secret).args("x").tags(tag).enqueue()
    with pytest.raises(
        JobAuthorizationError, match="tenant 'globex' may only run jobs under globex"
    ):
        (
            scheduler.job(secret_targets.echo_secret)
            .args("x")
            .tags(tag)
            .property("tenant", "globex")
            .enqueue()
        )
    with pytest.raises(JobAuthorizationError):
        scheduler.enqueue_many(targets.add, [(1, 2), (3, 4)])
    assert tagged(container, tag) == []


def test_an_authorized_job_runs_and_a_blocked_tag_is_refused_at_dispatch(
    store_url: str, make_worker: Any
) -> None:
    container = guarded(store_url)
    scheduler = container.scheduler()
    allowed = (
        scheduler.job(secret_targets.echo_secret).args("ok").property("tenant", "acme").enqueue()
    )
    frozen = (
        scheduler.job(secret_targets.echo_secret)
        .args("no")
        .property("tenant", "acme")
        .tags("frozen")
        .enqueue()
    )
    make_worker(container).run_until_idle(20)
    assert scheduler.result(allowed).value == "ok-result"
    refused = scheduler.get(frozen)
    assert refused is not None and refused.status is JobStatus.FAILED
    assert refused.result is None and refused.attempt == 1
    assert "job authorization refused to execute" in (refused.last_error or "")
    assert "tag 'frozen' is blocked" in (refused.last_error or "")
