"""Optional SPI members and the Java original's signatures (issue 25).

A member marked ``@optional_member`` in its protocol may be left out: a class subclassing the
protocol inherits the default body, and the container completes a structural class with it. A
missing *required* member is still refused at registration, naming it. A two-argument
``ResilienceStrategy.execute`` and a name-only ``PayloadMaskingPolicy.is_sensitive_field`` are
called in the form the engine uses.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import pytest
from dependency_injector import providers

from ratchet_api import Priority
from ratchet_api.errors import CircuitBreakerOpenError, NonConformingAlternativeError
from ratchet_api.model import CircuitBreakerExceptionFilter, JobType, MaskingContext
from ratchet_api.spi import (
    DEFAULT_CIRCUIT_RETRY_DELAY,
    BeanResolver,
    MetricsCollector,
    NodeIdentityProvider,
    PayloadMaskingPolicy,
    ResilienceStrategy,
    SchedulerLifecycleHook,
    SharedBean,
    optional_members,
)
from ratchet_core.defaults.resilience import ResilienceStrategyAdapter
from ratchet_core.payload.masking import MASK, PayloadMasker
from ratchet_core.runtime.alternatives import CompletedAlternative
from ratchet_core.runtime.container import RatchetDynamicContainer, create_container

T = TypeVar("T")


@pytest.fixture
def container() -> RatchetDynamicContainer:
    return create_container({"alternatives.entry_points": "false"})


# ---------------------------------------------------------------- ResilienceStrategy


class TwoArgumentStrategy:
    """The Java original's shape: ``execute(service_name, task)`` and the availability check,
    nothing else. Counts calls per service and can be told to reject."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.open: set[str] = set()
        self.lock = threading.Lock()

    def execute(self, service_name: str, task: Callable[[], T]) -> T:
        if service_name in self.open:
            raise CircuitBreakerOpenError(service_name)
        with self.lock:
            self.calls.append(service_name)
        return task()

    def is_service_available(self, service_name: str) -> bool:
        return service_name not in self.open


class SubclassedTwoArgumentStrategy(ResilienceStrategy):
    """The same, written as ``implements ResilienceStrategy``: it inherits the defaults."""

    def execute(self, service_name: str, task: Callable[[], T]) -> T:  # type: ignore[override]
        return task()

    def is_service_available(self, service_name: str) -> bool:
        return True


def test_get_retry_delay_defaults_to_30_seconds_in_the_protocol_itself() -> None:
    assert SubclassedTwoArgumentStrategy().get_retry_delay("mail") == timedelta(seconds=30)
    assert timedelta(seconds=30) == DEFAULT_CIRCUIT_RETRY_DELAY


def test_a_strategy_leaving_out_get_retry_delay_is_given_30_seconds_by_the_container(
    container: RatchetDynamicContainer,
) -> None:
    container.alternatives.register(
        ResilienceStrategy, TwoArgumentStrategy, priority=Priority.APPLICATION
    )
    container.build()
    assert container.resilience_strategy().get_retry_delay("mail") == timedelta(seconds=30)


def test_a_two_argument_execute_runs_in_the_form_the_worker_calls(
    container: RatchetDynamicContainer,
) -> None:
    container.alternatives.register(
        ResilienceStrategy, TwoArgumentStrategy, priority=Priority.APPLICATION
    )
    container.build()
    strategy = container.resilience_strategy()
    some_filter = CircuitBreakerExceptionFilter(ignore=(ValueError,))
    # The worker passes the target's filter as a third argument; the seed form ignores it.
    assert strategy.execute("mail", lambda: 42, some_filter) == 42
    assert strategy.execute("mail", lambda: 43) == 43
    assert strategy.__wrapped__.calls == ["mail", "mail"]
    assert isinstance(strategy.__wrapped__, TwoArgumentStrategy)


def test_the_default_execute_async_runs_the_coroutine_under_the_strategys_execute(
    container: RatchetDynamicContainer,
) -> None:
    container.alternatives.register(
        ResilienceStrategy, TwoArgumentStrategy, priority=Priority.APPLICATION
    )
    container.build()
    strategy = container.resilience_strategy()
    loop_threads: list[int] = []

    async def job() -> str:
        loop_threads.append(threading.get_ident())
        return "done"

    async def main() -> tuple[str, int]:
        result = await strategy.execute_async("payments", job, None)
        return result, threading.get_ident()

    result, loop_thread = asyncio.run(main())
    assert result == "done"
    assert loop_threads == [loop_thread], "the coroutine must run on the caller's loop"
    assert strategy.__wrapped__.calls == ["payments"], "the strategy did not see the async call"

    strategy.__wrapped__.open.add("payments")
    with pytest.raises(CircuitBreakerOpenError):
        asyncio.run(strategy.execute_async("payments", job, None))
    assert len(loop_threads) == 1, "a rejected async job must not run"


def test_a_subclass_with_the_two_argument_execute_inherits_a_working_execute_async() -> None:
    strategy = SubclassedTwoArgumentStrategy()

    async def job() -> int:
        return 5

    assert asyncio.run(strategy.execute_async("svc", job)) == 5
    adapted = ResilienceStrategyAdapter(strategy)
    assert adapted.execute("svc", lambda: 6, CircuitBreakerExceptionFilter()) == 6


def test_a_complete_strategy_is_handed_out_unwrapped(container: RatchetDynamicContainer) -> None:
    from ratchet_core.defaults.resilience import DefaultResilienceStrategy

    container.build()
    assert type(container.resilience_strategy()) is DefaultResilienceStrategy


def test_a_strategy_missing_a_required_member_is_refused_naming_it(
    container: RatchetDynamicContainer,
) -> None:
    class ExecuteOnly:
        def execute(self, service_name: str, task: Callable[[], T]) -> T:
            return task()

    with pytest.raises(NonConformingAlternativeError) as info:
        container.alternatives.register(ResilienceStrategy, ExecuteOnly)
    assert info.value.missing == ("is_service_available",)


# ---------------------------------------------------------------- PayloadMaskingPolicy


class IbanOnlyPolicy:
    """A name-only policy, as the Java original's first form."""

    def is_sensitive_field(self, field_name: str) -> bool:
        return field_name == "iban"


CONTEXT = MaskingContext(job_id=uuid.uuid4(), job_properties={})


def test_a_name_only_masking_policy_works_in_the_masker() -> None:
    masker = PayloadMasker(IbanOnlyPolicy(), enabled=True)  # type: ignore[arg-type]
    assert masker.mask({"iban": "DE00", "amount": 3}, CONTEXT) == {"iban": MASK, "amount": 3}


def test_a_name_only_masking_policy_is_adapted_by_the_container(
    container: RatchetDynamicContainer,
) -> None:
    container.alternatives.register(
        PayloadMaskingPolicy, IbanOnlyPolicy, priority=Priority.APPLICATION
    )
    container.build()
    policy = container.payload_masking_policy()
    assert policy.is_sensitive_field("iban", CONTEXT) is True
    assert policy.is_sensitive_field("amount", CONTEXT) is False


# ---------------------------------------------------------------- generic completion


def test_the_protocols_say_which_members_are_optional() -> None:
    assert optional_members(ResilienceStrategy) == {"execute_async", "get_retry_delay"}
    assert optional_members(BeanResolver) == {"validate_resolvable", "acquire"}
    assert optional_members(SchedulerLifecycleHook) == {
        "before_start",
        "after_start",
        "before_stop",
        "after_stop",
    }
    assert optional_members(NodeIdentityProvider) == {"identity"}
    assert "job_started" not in optional_members(MetricsCollector)
    assert "local_wakeup" not in optional_members(MetricsCollector)
    assert "signal_waiting" in optional_members(MetricsCollector)


class ResolveOnly:
    def __init__(self) -> None:
        self.resolved: list[type] = []

    def resolve(self, cls: type[T]) -> T:
        self.resolved.append(cls)
        if cls is dict:
            raise LookupError("no dict here")
        return cls()

    def extra(self) -> str:
        return "mine"


def test_a_resolve_only_bean_resolver_gets_validate_and_acquire_built_on_resolve(
    container: RatchetDynamicContainer,
) -> None:
    container.alternatives.register(BeanResolver, ResolveOnly, priority=Priority.APPLICATION)
    container.build()
    resolver = container.bean_resolver()
    assert isinstance(resolver, CompletedAlternative)
    handle = resolver.acquire(list)
    assert isinstance(handle, SharedBean) and handle.instance == []
    handle.close()
    resolver.validate_resolvable(set)
    with pytest.raises(LookupError, match="no dict"):
        resolver.validate_resolvable(dict)
    assert resolver.__wrapped__.resolved == [list, set, dict]
    assert resolver.extra() == "mine"  # other attributes are the instance's


class OnlyBeforeStart:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def before_start(self) -> None:
        self.calls.append("before_start")


def test_a_hook_with_one_method_is_accepted_and_the_others_do_nothing(
    container: RatchetDynamicContainer,
) -> None:
    container.alternatives.register(
        SchedulerLifecycleHook, OnlyBeforeStart, priority=Priority.APPLICATION
    )
    container.build()
    (hook,) = container.lifecycle_hooks()
    for name in ("before_start", "after_start", "before_stop", "after_stop"):
        getattr(hook, name)()
    assert hook.__wrapped__.calls == ["before_start"]


class ThreeCallbacks:
    def job_started(self, job_id: uuid.UUID, job_type: JobType, priority: int) -> None:
        pass

    def job_completed(self, job_id: uuid.UUID, job_type: JobType, execution_time_ms: int) -> None:
        pass

    def job_failed(
        self, job_id: uuid.UUID, job_type: JobType, cause: BaseException, attempt: int
    ) -> None:
        pass


def test_a_metrics_collector_must_implement_the_first_ten_callbacks(
    container: RatchetDynamicContainer,
) -> None:
    with pytest.raises(NonConformingAlternativeError) as info:
        container.alternatives.register(MetricsCollector, ThreeCallbacks)
    assert set(info.value.missing) == {
        "success_finalization_retried",
        "success_finalization_minimal",
        "success_finalization_stuck",
        "claim_transient_failure",
        "jobs_claimed",
        "gate_rejected",
        "local_wakeup",
    }
    assert "signal_waiting" not in str(info.value)


class TenCallbacks(ThreeCallbacks):
    def __init__(self) -> None:
        self.wakeups: list[str] = []

    def success_finalization_retried(self, job_id: uuid.UUID, job_type: JobType) -> None:
        pass

    def success_finalization_minimal(self, job_id: uuid.UUID, job_type: JobType) -> None:
        pass

    def success_finalization_stuck(self, job_id: uuid.UUID, job_type: JobType) -> None:
        pass

    def claim_transient_failure(self, reason: str) -> None:
        pass

    def jobs_claimed(self, node_id: str, count: int) -> None:
        pass

    def gate_rejected(self, gate: str, reason: str) -> None:
        pass

    def local_wakeup(self, reason: str) -> None:
        self.wakeups.append(reason)


def test_a_metrics_collector_with_the_ten_required_callbacks_gets_no_op_for_the_rest(
    container: RatchetDynamicContainer,
) -> None:
    container.alternatives.register(MetricsCollector, TenCallbacks, priority=Priority.APPLICATION)
    container.build()
    metrics = container.metrics_collector()
    metrics.signal_waiting(uuid.uuid4(), JobType.STANDARD, "key")
    metrics.circuit_breaker_state("svc", "CLOSED", "OPEN")
    metrics.local_wakeup("enqueue")
    assert metrics.__wrapped__.wakeups == ["enqueue"]


def test_a_node_identity_provider_with_get_node_id_only_gets_an_identity(
    container: RatchetDynamicContainer,
) -> None:
    class FixedNode:
        def get_node_id(self) -> str:
            return "pod-7"

    container.alternatives.register(
        NodeIdentityProvider, providers.Object(FixedNode()), priority=Priority.APPLICATION
    )
    container.build()
    identity = container.node_identity_provider().identity()
    assert identity.node_id == "pod-7" and identity.pid > 0


def test_an_unknown_product_is_checked_and_completed_when_first_provided(
    container: RatchetDynamicContainer,
) -> None:
    def make_hook():  # type: ignore[no-untyped-def]  # no annotation: product unknown
        return OnlyBeforeStart()

    def make_bad():  # type: ignore[no-untyped-def]
        return object()

    container.alternatives.register(SchedulerLifecycleHook, providers.Callable(make_hook))
    container.alternatives.register(BeanResolver, providers.Callable(make_bad))
    container.build()
    (hook,) = container.lifecycle_hooks()
    hook.after_stop()
    with pytest.raises(NonConformingAlternativeError, match="resolve"):
        container.bean_resolver()


def _instance_is_kept(value: Any) -> bool:
    return not isinstance(value, (CompletedAlternative, ResilienceStrategyAdapter))


def test_complete_alternatives_are_handed_out_as_they_are(
    container: RatchetDynamicContainer,
) -> None:
    from ratchet_core.defaults.metrics import NoOpMetricsCollector

    class Partial(NoOpMetricsCollector):
        pass

    container.alternatives.register(MetricsCollector, Partial, priority=Priority.APPLICATION)
    container.build()
    metrics = container.metrics_collector()
    assert type(metrics) is Partial and _instance_is_kept(metrics)


def test_cancelling_the_default_execute_async_cancels_the_coroutine() -> None:
    strategy = ResilienceStrategyAdapter(TwoArgumentStrategy())

    async def main() -> None:
        started, cancelled = asyncio.Event(), asyncio.Event()

        async def job() -> None:
            started.set()
            try:
                await asyncio.Event().wait()  # never set: only a cancellation ends it
            except asyncio.CancelledError:
                cancelled.set()
                raise

        call = asyncio.create_task(strategy.execute_async("svc", job))
        # cancelled as soon as the job runs, possibly before the helper thread recorded it
        await started.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        # (the bound only turns a lost cancellation into a failure instead of a hang)
        await asyncio.wait_for(cancelled.wait(), timeout=60)

    asyncio.run(main())
