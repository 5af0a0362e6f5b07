"""A job rejected by an open circuit breaker keeps its attempt (issue 15).

The worker asks ``ResilienceStrategy.is_service_available`` before the call; while the circuit
is open the claim is given back with ``release_claim(run_at=...)``: the job is due again after
``get_retry_delay`` with its attempt count unchanged, and the target is never called. A
rejection by the breaker itself (it opened after the pre-check) is handled the same way.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from dependency_injector import providers

from ratchet_api.errors import CircuitBreakerOpenError, TransientStoreError
from ratchet_api.model import JobStatus
from ratchet_api.store.protocols import WorkerBatchStore
from ratchet_core.defaults.metrics import NoOpMetricsCollector
from tests.engine import targets
from tests.engine.conftest import build_container, migrate

T = TypeVar("T")


def _assert_deferred(container: Any, job_id: Any, delay: timedelta) -> None:
    store = container.job_store()
    job = store.find_by_id(job_id)
    assert job is not None
    assert (job.status, job.attempt, job.owner) == (JobStatus.PENDING, 0, None)
    now = store.server_now()
    assert now + delay - timedelta(minutes=5) < job.scheduled_at <= now + delay


def test_an_open_circuit_defers_the_job_without_counting_an_attempt(engine: Any) -> None:
    resilience = engine.resilience_strategy()
    opened = resilience.breaker("tests-guarded")
    for _ in range(opened.config.minimum_calls):
        opened.record_failure()
    assert not resilience.is_service_available("tests-guarded")
    job_id = engine.scheduler().job(targets.guarded_call).args(41).max_retries(0).enqueue()
    calls_before = len(targets.BREAKER_CALLS)
    stats = engine.worker().run_until_idle(20)
    assert stats.deferred == 1 and stats.retried == 0 and stats.failed == 0
    assert len(targets.BREAKER_CALLS) == calls_before, "the target ran through an open circuit"
    _assert_deferred(engine, job_id, resilience.get_retry_delay("tests-guarded"))


class _OpensAfterThePreCheck:
    """A ResilienceStrategy whose pre-check says available but whose breaker then rejects
    the call (it opened in between)."""

    def execute(self, service_name: str, task: Callable[[], T], exception_filter: Any = None) -> T:
        raise CircuitBreakerOpenError(service_name)

    async def execute_async(
        self, service_name: str, task: Callable[[], Awaitable[T]], exception_filter: Any = None
    ) -> T:
        raise CircuitBreakerOpenError(service_name)

    def is_service_available(self, service_name: str) -> bool:
        return True

    def get_retry_delay(self, service_name: str) -> timedelta:
        return timedelta(minutes=30)


def test_a_call_rejected_by_the_breaker_keeps_its_attempt(engine: Any) -> None:
    with engine.resilience_strategy.override(providers.Object(_OpensAfterThePreCheck())):
        job_id = engine.scheduler().job(targets.guarded_call).args(7).max_retries(0).enqueue()
        stats = engine.worker().run_until_idle(20)
    assert stats.deferred == 1 and stats.failed == 0
    _assert_deferred(engine, job_id, timedelta(minutes=30))


class _ClaimsFail:
    """The real store, except that every claim fails as a dropped connection would."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.claims = 0

    def claim_next_batch(self, *args: Any, **kwargs: Any) -> Any:
        self.claims += 1
        raise TransientStoreError("claim_next_batch failed: server closed the connection")

    def claim_and_start(self, *args: Any, **kwargs: Any) -> Any:
        # the claim of WorkerBatchStore (claim and start marks in one statement) fails alike
        self.claims += 1
        raise TransientStoreError("claim_and_start failed: server closed the connection")

    def capability(self, kind: type) -> Any:
        # a capability of the real store is served through this wrapper, so its claims fail
        found = self._real.capability(kind)
        return self if found is not None and kind is WorkerBatchStore else found

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _Recording(NoOpMetricsCollector):
    def __init__(self) -> None:
        self.poller_states: list[tuple[str, str]] = []

    def poller_breaker_state(self, poller: str, state: str) -> None:
        self.poller_states.append((poller, state))


def test_the_poller_breaker_stops_claiming_from_a_failing_store(sqlite_url: str) -> None:
    container = build_container(
        sqlite_url,
        **{
            "circuit_breaker.poller.minimum_calls": "2",
            "circuit_breaker.poller.sliding_window_size": "2",
            "circuit_breaker.poller.wait_duration": "1h",
            "worker.poll_interval": "10ms",
            "worker.poll_max_interval": "20ms",
        },
    )
    store = container.job_store()
    migrate(store)
    failing = _ClaimsFail(store)
    metrics = _Recording()
    with (
        container.job_store.override(providers.Object(failing)),
        container.metrics_collector.override(providers.Object(metrics)),
    ):
        worker = container.worker()
        worker.start()
        try:
            deadline = time.monotonic() + 10
            while failing.claims < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.5)  # 25 poll intervals: an unguarded poller claims again and again
        finally:
            worker.stop(timeout=5)
    store.close()
    assert failing.claims == 2
    assert metrics.poller_states == [(worker.node_id, "OPEN")]
