"""The count-based sliding-window circuit breaker and the default resilience strategy."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

import pytest

from ratchet_api.errors import CircuitBreakerOpenError
from ratchet_api.model import (
    CircuitBreakerConfig,
    CircuitBreakerExceptionFilter,
    CircuitBreakerProfile,
)
from ratchet_core.defaults.resilience import (
    CircuitBreaker,
    CircuitState,
    DefaultCircuitBreakerConfigProvider,
    DefaultResilienceStrategy,
)
from ratchet_core.runtime.config import DefaultRatchetConfig


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Boom(Exception):
    pass


class Benign(Exception):
    pass


def fail() -> None:
    raise Boom("down")


def ok() -> str:
    return "ok"


CONFIG = CircuitBreakerConfig(
    failure_rate_threshold=50,
    sliding_window_size=4,
    minimum_calls=4,
    wait_duration_ms=10_000,
    permitted_calls_in_half_open=2,
)
EVERYTHING = CircuitBreakerExceptionFilter()


def breaker(clock: Clock, changes: list[tuple[str, str]] | None = None) -> CircuitBreaker:
    def record(name: str, old: CircuitState, new: CircuitState) -> None:
        if changes is not None:
            changes.append((old.value, new.value))

    return CircuitBreaker("payments", CONFIG, on_state_change=record, clock=clock)


def run(cb: CircuitBreaker, task: object, f: CircuitBreakerExceptionFilter = EVERYTHING) -> object:
    try:
        return cb.call(task, f)  # type: ignore[arg-type]
    except (Boom, Benign, CircuitBreakerOpenError) as exc:
        return exc


def test_stays_closed_below_minimum_calls_even_if_all_fail() -> None:
    cb = breaker(Clock())
    for _ in range(3):
        assert isinstance(run(cb, fail), Boom)
    assert cb.state is CircuitState.CLOSED


def test_opens_when_failure_rate_reaches_threshold_and_rejects() -> None:
    changes: list[tuple[str, str]] = []
    cb = breaker(Clock(), changes)
    run(cb, ok)
    run(cb, ok)
    run(cb, fail)
    assert cb.state is CircuitState.CLOSED
    run(cb, fail)  # 2 of 4 = 50 %
    assert cb.state is CircuitState.OPEN
    assert changes == [("CLOSED", "OPEN")]
    calls = []
    result = run(cb, lambda: calls.append(1))
    assert isinstance(result, CircuitBreakerOpenError) and result.service == "payments"
    assert calls == []


def test_window_slides_so_old_failures_age_out() -> None:
    cb = breaker(Clock())
    run(cb, fail)
    for _ in range(3):
        run(cb, ok)
    for _ in range(4):
        run(cb, ok)
    run(cb, fail)  # window: ok ok ok fail -> 25 %
    assert cb.state is CircuitState.CLOSED
    assert cb.failure_rate() == 25.0


def open_breaker(clock: Clock, changes: list[tuple[str, str]] | None = None) -> CircuitBreaker:
    cb = breaker(clock, changes)
    for _ in range(4):
        run(cb, fail)
    assert cb.state is CircuitState.OPEN
    return cb


def test_half_open_after_wait_then_closes_on_successful_trials() -> None:
    clock = Clock()
    changes: list[tuple[str, str]] = []
    cb = open_breaker(clock, changes)
    clock.now += 9.9
    assert isinstance(run(cb, ok), CircuitBreakerOpenError)
    clock.now += 0.2
    assert cb.state is CircuitState.HALF_OPEN
    assert run(cb, ok) == "ok"
    assert cb.state is CircuitState.HALF_OPEN
    assert run(cb, ok) == "ok"
    assert cb.state is CircuitState.CLOSED
    assert changes == [("CLOSED", "OPEN"), ("OPEN", "HALF_OPEN"), ("HALF_OPEN", "CLOSED")]
    assert cb.failure_rate() == 0.0


def test_half_open_reopens_when_trials_fail() -> None:
    clock = Clock()
    cb = open_breaker(clock)
    clock.now += 10
    run(cb, fail)
    run(cb, fail)
    assert cb.state is CircuitState.OPEN
    assert cb.remaining_open_time() == timedelta(seconds=10)


def test_half_open_limits_concurrent_trial_calls() -> None:
    clock = Clock()
    cb = open_breaker(clock)
    clock.now += 10
    assert cb.try_acquire() and cb.try_acquire()
    assert not cb.try_acquire()
    assert isinstance(run(cb, ok), CircuitBreakerOpenError)


def test_ignored_exception_counts_as_neither_and_returns_the_trial_permit() -> None:
    clock = Clock()
    cb = open_breaker(clock)
    clock.now += 10
    ignoring = CircuitBreakerExceptionFilter(ignore=(Benign,))

    def benign() -> None:
        raise Benign("not the service's fault")

    for _ in range(5):  # more than the permitted trials: each gives its permit back
        assert isinstance(run(cb, benign, ignoring), Benign)
    assert cb.state is CircuitState.HALF_OPEN
    run(cb, ok)
    run(cb, ok)
    assert cb.state is CircuitState.CLOSED


def test_record_filter_counts_only_matching_exceptions_through_the_cause_chain() -> None:
    cb = breaker(Clock())
    only_io = CircuitBreakerExceptionFilter(record=(OSError,))

    def wrapped_io() -> None:
        try:
            raise ConnectionError("reset")
        except ConnectionError as exc:
            raise RuntimeError("call failed") from exc

    for _ in range(4):
        run(cb, fail, only_io)  # Boom is not recorded
    assert cb.state is CircuitState.CLOSED and cb.failure_rate() == 0.0
    for _ in range(4):
        with pytest.raises(RuntimeError):
            cb.call(wrapped_io, only_io)
    assert cb.state is CircuitState.OPEN


def test_errors_are_reraised_unchanged() -> None:
    cb = breaker(Clock())
    error = Boom("original")

    def raise_it() -> None:
        raise error

    with pytest.raises(Boom) as info:
        cb.call(raise_it, EVERYTHING)
    assert info.value is error


def test_breaker_is_consistent_under_concurrent_calls() -> None:
    cb = CircuitBreaker(
        "shared",
        CircuitBreakerConfig(failure_rate_threshold=100, sliding_window_size=50, minimum_calls=50),
    )
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        for _ in range(200):
            run(cb, ok)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert cb.state is CircuitState.CLOSED and cb.failure_rate() == 0.0


def strategy(
    values: dict[str, str], metrics: object = None, clock: Clock | None = None
) -> DefaultResilienceStrategy:
    provider = DefaultCircuitBreakerConfigProvider(DefaultRatchetConfig.from_dict(values))
    return DefaultResilienceStrategy(provider, metrics, clock=clock or Clock())


class StateMetrics:
    def __init__(self) -> None:
        self.changes: list[tuple[str, str, str]] = []

    def circuit_breaker_state(self, service: str, old_state: str, new_state: str) -> None:
        self.changes.append((service, old_state, new_state))


SMALL = {
    "circuit_breaker.minimum_calls": "2",
    "circuit_breaker.sliding_window_size": "2",
    "circuit_breaker.wait_duration": "5s",
}


def test_strategy_keeps_one_breaker_per_service_and_reports_state_changes() -> None:
    metrics = StateMetrics()
    s = strategy(SMALL, metrics)
    for _ in range(2):
        with pytest.raises(Boom):
            s.execute("mail", fail)
    assert not s.is_service_available("mail")
    assert s.is_service_available("sms")
    assert s.execute("sms", ok) == "ok"
    with pytest.raises(CircuitBreakerOpenError):
        s.execute("mail", ok)
    assert metrics.changes == [("mail", "CLOSED", "OPEN")]
    assert s.get_retry_delay("mail") == timedelta(seconds=5)
    assert s.get_retry_delay("sms") == timedelta(seconds=5)


def test_strategy_merges_the_targets_filter() -> None:
    s = strategy(SMALL)
    ignore_boom = CircuitBreakerExceptionFilter(ignore=(Boom,))
    for _ in range(4):
        with pytest.raises(Boom):
            s.execute("mail", fail, ignore_boom)
    assert s.is_service_available("mail")


def test_strategy_disabled_runs_tasks_directly() -> None:
    s = strategy({**SMALL, "circuit_breaker.enabled": "false"})
    for _ in range(5):
        with pytest.raises(Boom):
            s.execute("mail", fail)
    assert s.execute("mail", ok) == "ok"
    assert s.is_service_available("mail")


def test_execute_async_opens_and_rejects() -> None:
    s = strategy(SMALL)

    async def afail() -> None:
        raise Boom("down")

    async def aok() -> str:
        return "ok"

    async def scenario() -> None:
        for _ in range(2):
            with pytest.raises(Boom):
                await s.execute_async("api", afail)
        with pytest.raises(CircuitBreakerOpenError):
            await s.execute_async("api", aok)
        assert await s.execute_async("other", aok) == "ok"

    asyncio.run(scenario())


def test_cancelled_async_call_does_not_count_as_failure() -> None:
    s = strategy(SMALL)

    async def cancelled() -> None:
        raise asyncio.CancelledError

    async def scenario() -> None:
        for _ in range(3):
            with pytest.raises(asyncio.CancelledError):
                await s.execute_async("api", cancelled)

    asyncio.run(scenario())
    assert s.breaker("api").failure_rate() == 0.0


def test_config_provider_reads_profile_settings() -> None:
    provider = DefaultCircuitBreakerConfigProvider(
        DefaultRatchetConfig.from_dict(
            {"circuit_breaker.wait_duration": "500ms", "circuit_breaker.poller.minimum_calls": "7"}
        )
    )
    assert provider.config_for(CircuitBreakerProfile.JOB).wait_duration_ms == 500
    assert provider.config_for(CircuitBreakerProfile.POLLER).minimum_calls == 7
    assert provider.is_enabled()


def test_configs_copy_their_exception_lists() -> None:
    record: list[type[BaseException]] = [OSError]
    ignore: list[type[BaseException]] = [KeyError]
    config = CircuitBreakerConfig(record_exceptions=record, ignore_exceptions=ignore)  # type: ignore[arg-type]
    exception_filter = CircuitBreakerExceptionFilter(record=record, ignore=ignore)  # type: ignore[arg-type]
    record.append(ValueError)
    ignore.clear()
    assert config.record_exceptions == (OSError,) and config.ignore_exceptions == (KeyError,)
    assert exception_filter.record == (OSError,) and exception_filter.ignore == (KeyError,)


def test_configs_with_different_predicates_are_not_equal() -> None:
    def transient(exc: BaseException) -> bool:
        return isinstance(exc, OSError)

    def timeouts(exc: BaseException) -> bool:
        return isinstance(exc, TimeoutError)

    assert CircuitBreakerConfig(record_predicate=transient) != CircuitBreakerConfig(
        record_predicate=timeouts
    )
    assert CircuitBreakerConfig(record_predicate=transient) == CircuitBreakerConfig(
        record_predicate=transient
    )
    assert CircuitBreakerConfig(record_predicate=transient) != CircuitBreakerConfig()
    assert CircuitBreakerExceptionFilter(predicate=transient) != CircuitBreakerExceptionFilter(
        predicate=timeouts
    )
