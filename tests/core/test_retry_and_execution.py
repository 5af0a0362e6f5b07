"""Retry passthrough, adaptive polling, execution tuning, executors, node identity."""

from __future__ import annotations

import os
import random
import socket
import threading
from datetime import timedelta

import pytest

from ratchet_api.errors import ConfigurationError
from ratchet_api.model import BackoffPolicy, PollingConfig, ThreadingMode
from ratchet_api.spi import RetryPolicy
from ratchet_core.defaults.cluster import (
    DefaultNodeIdentityProvider,
    DefaultNodeTagAffinityProvider,
)
from ratchet_core.defaults.execution import (
    AdaptivePollingDelayStrategy,
    DefaultExecutionTuningProvider,
    DefaultExecutorProvider,
)
from ratchet_core.defaults.retry import DefaultRetryPolicy, bind_retry_policy
from ratchet_core.runtime.config import DefaultRatchetConfig


def test_retry_passthrough_uses_the_jobs_max_retries() -> None:
    policy = DefaultRetryPolicy().bind(2, BackoffPolicy.fixed(3))
    error = RuntimeError("x")
    assert [policy.should_retry(a, error) for a in (1, 2, 3)] == [True, True, False]
    assert DefaultRetryPolicy().bind(0, BackoffPolicy.fixed(1)).should_retry(1, error) is False


def test_retry_passthrough_uses_the_jobs_backoff() -> None:
    fixed = DefaultRetryPolicy().bind(5, BackoffPolicy.fixed(3))
    assert fixed.get_delay(1) == fixed.get_delay(4) == timedelta(seconds=3)
    expo = DefaultRetryPolicy().bind(
        5, BackoffPolicy.exponential(1, multiplier=2, maximum=10, jitter=False)
    )
    assert [expo.get_delay(a).total_seconds() for a in (1, 2, 3, 4, 5)] == [1, 2, 4, 8, 10]


def test_retry_jitter_stays_within_half_and_full_delay() -> None:
    policy = DefaultRetryPolicy(rng=random.Random(7)).bind(
        5, BackoffPolicy.exponential(4, maximum=100, jitter=True)
    )
    delays = {policy.get_delay(1).total_seconds() for _ in range(200)}
    assert min(delays) >= 2.0 and max(delays) <= 4.0 and len(delays) > 100


def test_bind_leaves_an_override_without_bind_unchanged() -> None:
    class Never:
        def should_retry(self, attempt: int, cause: BaseException) -> bool:
            return False

        def get_delay(self, attempt: int) -> timedelta:
            return timedelta(0)

    never = Never()
    assert bind_retry_policy(never, 9, BackoffPolicy()) is never
    bound = bind_retry_policy(DefaultRetryPolicy(), 1, BackoffPolicy.fixed(2))
    assert isinstance(bound, RetryPolicy) and bound.get_delay(1) == timedelta(seconds=2)


def polling(
    min_ms: int = 50, max_ms: int = 1000, factor: float = 2.0
) -> AdaptivePollingDelayStrategy:
    return AdaptivePollingDelayStrategy(
        PollingConfig(
            min_interval=timedelta(milliseconds=min_ms),
            max_interval=timedelta(milliseconds=max_ms),
            backoff_factor=factor,
        )
    )


def ms(delay: timedelta) -> float:
    return delay.total_seconds() * 1000


def test_polling_grows_exponentially_while_idle_up_to_the_maximum() -> None:
    strategy = polling()
    delays = [ms(strategy.next_delay(0, 4)) for _ in range(8)]
    assert delays == pytest.approx([50, 100, 200, 400, 800, 1000, 1000, 1000])


def test_polling_returns_to_the_minimum_when_work_is_found() -> None:
    strategy = polling()
    for _ in range(5):
        strategy.next_delay(0, 4)
    assert ms(strategy.next_delay(3, 4)) == pytest.approx(50)
    assert ms(strategy.next_delay(0, 4)) == pytest.approx(50)


def test_polling_reset_on_wakeup_starts_from_the_minimum() -> None:
    strategy = polling()
    for _ in range(6):
        strategy.next_delay(0, 4)
    strategy.reset()
    assert ms(strategy.next_delay(0, 4)) == pytest.approx(50)


def test_polling_with_no_free_slot_is_not_idleness() -> None:
    strategy = polling()
    for _ in range(4):
        strategy.next_delay(0, 4)
    assert ms(strategy.next_delay(0, 0)) == pytest.approx(50)


def test_polling_refuses_inverted_intervals() -> None:
    with pytest.raises(ValueError, match="max_interval"):
        polling(min_ms=500, max_ms=100)


def tuning(values: dict[str, str]) -> DefaultExecutionTuningProvider:
    return DefaultExecutionTuningProvider(DefaultRatchetConfig.from_dict(values))


def test_tuning_per_type_override_then_global_then_engine_default() -> None:
    assert tuning({}).max_concurrency("sync", 6) == 6
    assert tuning({"worker.concurrency": "3"}).max_concurrency("sync", 6) == 3
    both = tuning({"worker.concurrency": "3", "worker.concurrency.async": "50"})
    assert both.max_concurrency("async", 6) == 50
    assert both.max_concurrency("sync", 6) == 3
    assert tuning({"worker.concurrency.gpu": "1"}).max_concurrency("GPU", 6) == 1


def test_tuning_refuses_zero_concurrency_naming_the_key() -> None:
    with pytest.raises(ConfigurationError, match=r"worker\.concurrency\.sync"):
        tuning({"worker.concurrency.sync": "0"}).max_concurrency("sync", 4)


def test_tuning_threading_mode() -> None:
    assert tuning({}).default_threading_mode() is ThreadingMode.THREADS
    assert (
        tuning({"worker.threading_mode": "inline"}).default_threading_mode() is ThreadingMode.INLINE
    )
    with pytest.raises(ConfigurationError, match="threads, inline"):
        tuning({"worker.threading_mode": "fibers"}).default_threading_mode()


def test_executor_threads_are_named_and_bounded() -> None:
    executor = DefaultExecutorProvider().job_executor(2)
    barrier = threading.Barrier(2, timeout=5)

    def name() -> str:
        barrier.wait()
        return threading.current_thread().name

    try:
        names = {f.result(timeout=5) for f in [executor.submit(name) for _ in range(2)]}
    finally:
        executor.shutdown()
    assert len(names) == 2
    assert all(n.startswith("ratchet-job-") for n in names)


def test_node_identity_default_is_host_pid_random_and_stable() -> None:
    provider = DefaultNodeIdentityProvider(DefaultRatchetConfig.from_dict({}))
    host, pid = socket.gethostname(), os.getpid()
    assert provider.get_node_id().startswith(f"{host}-{pid}-")
    assert provider.get_node_id() == provider.identity().node_id
    other = DefaultNodeIdentityProvider(DefaultRatchetConfig.from_dict({}))
    assert other.get_node_id() != provider.get_node_id()


def test_node_identity_configured_id_wins() -> None:
    provider = DefaultNodeIdentityProvider(
        DefaultRatchetConfig.from_dict({"node.id": "worker-a", "node.tags": "gpu,eu"})
    )
    assert provider.get_node_id() == "worker-a"
    assert provider.identity().tags == frozenset({"gpu", "eu"})


def test_tag_affinity_from_configuration() -> None:
    empty = DefaultNodeTagAffinityProvider(DefaultRatchetConfig.from_dict({}))
    assert empty.tag_filter().is_empty
    f = DefaultNodeTagAffinityProvider(
        DefaultRatchetConfig.from_dict(
            {"node.tags.required": "gpu", "node.tags.excluded": "slow,legacy"}
        )
    ).tag_filter()
    assert f.required == frozenset({"gpu"}) and f.excluded == frozenset({"slow", "legacy"})


def test_tag_affinity_refuses_a_tag_both_required_and_excluded() -> None:
    with pytest.raises(ConfigurationError, match="gpu"):
        DefaultNodeTagAffinityProvider(
            DefaultRatchetConfig.from_dict(
                {"node.tags.required": "gpu", "node.tags.excluded": "gpu"}
            )
        )


def test_executor_threads_never_keep_the_process_alive() -> None:
    """Job threads are daemons and not joined at exit: a job that never returns cannot hang a
    stopping worker (issue 17)."""
    executor = DefaultExecutorProvider().job_executor(1)
    started = threading.Event()
    release = threading.Event()

    def job() -> bool:
        started.set()
        release.wait(5)
        return threading.current_thread().daemon

    future = executor.submit(job)
    assert started.wait(5)
    executor.shutdown(wait=False, cancel_futures=True)
    release.set()
    assert future.result(timeout=5) is True
    with pytest.raises(RuntimeError):
        executor.submit(job)
