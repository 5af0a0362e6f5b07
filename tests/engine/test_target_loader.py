"""The worker and the scheduler depend only on public protocols (issue 15): a
``JobInvocationResolver`` implementing only ``resolve`` is accepted, jobs then load through the
container's ``TargetLoader``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dependency_injector import providers

from ratchet_api import Priority
from ratchet_api.model import JobInvocation, JobStatus
from ratchet_api.spi import JobInvocationResolver, TargetLoader
from ratchet_core.enqueue.invocation import DefaultJobInvocationResolver
from tests.engine import targets
from tests.engine.conftest import build_container, migrate


class OnlyTheProtocol:
    """Implements ``JobInvocationResolver.resolve`` and nothing else."""

    def __init__(self, serializer: Any, class_policy: Any) -> None:
        self._inner = DefaultJobInvocationResolver(serializer=serializer, class_policy=class_policy)
        self.resolved = 0

    def resolve(
        self,
        target: Callable[..., Any],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> JobInvocation:
        self.resolved += 1
        return self._inner.resolve(target, args, kwargs)


def test_a_resolver_implementing_only_the_protocol_is_accepted_by_the_worker(
    sqlite_url: str, make_worker: Any
) -> None:
    container = build_container(sqlite_url)
    container.alternatives.register(
        JobInvocationResolver,
        providers.Singleton(
            OnlyTheProtocol,
            serializer=container.payload_serializer,
            class_policy=container.class_policy,
        ),
        priority=Priority.APPLICATION,
    )
    container.build()
    resolver = container.job_invocation_resolver()
    assert isinstance(resolver, OnlyTheProtocol) and not isinstance(resolver, TargetLoader)
    assert isinstance(container.target_loader(), TargetLoader)
    migrate(container.job_store())
    scheduler = container.scheduler()
    ids = [scheduler.enqueue(targets.add, 2, 3)]
    ids += scheduler.enqueue_many(targets.add, [(1, 1), (2, 2)])
    assert resolver.resolved == 3
    stats = make_worker(container).run_until_idle(20)
    assert stats.succeeded == 3
    results = [container.job_store().find_by_id(i) for i in ids]
    assert [(j.status, j.result) for j in results if j is not None] == [
        (JobStatus.SUCCEEDED, "5"),
        (JobStatus.SUCCEEDED, "2"),
        (JobStatus.SUCCEEDED, "4"),
    ]
    container.job_store().close()
