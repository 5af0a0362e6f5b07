"""Every override example of the SPI reference (../shared/seeds/000_3636be01ceaa5937.txt) that
Python can express, transcribed as the seed writes it, registered at ``Priority.APPLICATION``
and run in a real worker on SQLite (issue 25).

The seed's examples implement only what they need: a strategy with ``execute(service_name,
task)`` and ``is_service_available``, a resolve-only bean resolver, a metrics collector that
extends the no-op one. Before optional members existed five of them were refused at build and
two failed at run time.

Not transcribed: ``AsmLambdaAnalyzer``'s bytecode analysis has no Python counterpart (its
transcription below reads the function's own metadata, and nothing in the engine calls a
``LambdaAnalyzer``: docs/spi/lambda-analyzer.md); ``VirtualThreadExecutorProvider``'s
scheduled executor does not exist in this port (docs/spi/executor-provider.md), only its job
executor is transcribed.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
from dependency_injector import providers

from ratchet_api import JobContext, Priority
from ratchet_api.errors import ClassNotAllowedError
from ratchet_api.model import (
    CircuitBreakerConfig,
    JobLoggerContext,
    JobStatus,
    JobType,
    JobWakeupHint,
    LambdaDescriptor,
    NodeIdentity,
)
from ratchet_api.spi import (
    BeanResolver,
    ClassPolicy,
    ClusterCoordinator,
    ErrorSanitizer,
    ExecutorProvider,
    JobLoggerFactory,
    LambdaAnalyzer,
    MetricsCollector,
    NodeIdentityProvider,
    ResilienceStrategy,
    RetryPolicy,
    SchedulerLifecycleHook,
)
from ratchet_core.defaults.metrics import NoOpMetricsCollector
from ratchet_core.defaults.resilience import CircuitBreaker, CircuitState
from ratchet_core.enqueue.invocation import circuit_breaker
from tests.engine.conftest import SLOW_POLL, build_container, migrate
from tests.engine.worker_fixtures import wait_for

T = TypeVar("T")


def _container(sqlite_url: str, **overrides: Any) -> Any:
    container = build_container(
        sqlite_url, **{"alternatives.entry_points": "false", "cluster.backend": "none"}, **overrides
    )
    return container


def _register(container: Any, spi: type[Any], implementation: Any) -> Any:
    container.alternatives.register(spi, implementation, priority=Priority.APPLICATION)
    container.build()
    migrate(container.job_store())
    return container


def _job(container: Any, job_id: uuid.UUID) -> Any:
    job = container.job_store().find_by_id(job_id)
    assert job is not None
    return job


# ---------------------------------------------------------------- job targets

ATTEMPTS: dict[str, int] = {}
_LOCK = threading.Lock()


def do_not_retry(cls: type[T]) -> type[T]:
    """The seed's ``@DoNotRetry`` annotation: a marker on the exception class."""
    cls.do_not_retry = True  # type: ignore[attr-defined]
    return cls


@do_not_retry
class OrderValidationError(Exception):
    pass


class TransientError(Exception):
    pass


def reject_order(key: str) -> None:
    with _LOCK:
        ATTEMPTS[key] = ATTEMPTS.get(key, 0) + 1
    raise OrderValidationError("order 7 has no lines")


def flaky(key: str, failures: int) -> str:
    with _LOCK:
        ATTEMPTS[key] = ATTEMPTS.get(key, 0) + 1
        attempt = ATTEMPTS[key]
    if attempt <= failures:
        raise TransientError(f"attempt {attempt} timed out")
    return f"ok after {attempt}"


def call_mail_service(n: int) -> int:
    return n * 2


async def call_mail_service_async(n: int) -> int:
    return n * 3


circuit_breaker(service="seed-mail")(call_mail_service)
circuit_breaker(service="seed-mail")(call_mail_service_async)


def leak_secrets() -> None:
    raise ValueError("login failed: api_key=abc123 password=hunter2 user bob@example.com")


def thread_name() -> str:
    return threading.current_thread().name


def log_twice(order: int, context: JobContext) -> None:
    context.logger.info(f"processing order {order}")
    context.logger.warn("stock is low")


def add(a: int, b: int) -> int:
    return a + b


class InvoiceService:
    """A class the application's container (the seed's Spring ApplicationContext) provides."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def number(self, n: int) -> str:
        return f"{self.prefix}-{n}"


# ---------------------------------------------------------------- RetryPolicy


class SmartRetryPolicy:
    def should_retry(self, attempt: int, cause: BaseException) -> bool:
        # Never retry validation errors
        if getattr(type(cause), "do_not_retry", False):
            return False
        # Retry transient errors up to 5 times
        if isinstance(cause, TransientError):
            return attempt <= 5
        # Default: retry up to 3 times
        return attempt <= 3

    def get_delay(self, attempt: int) -> timedelta:
        # Exponential backoff: 1s, 2s, 4s, 8s...
        return timedelta(seconds=2 ** (attempt - 1))


def test_smart_retry_policy(sqlite_url: str) -> None:
    container = _register(_container(sqlite_url), RetryPolicy, SmartRetryPolicy)
    scheduler = container.scheduler()
    key = uuid.uuid4().hex
    rejected = scheduler.job(reject_order).args(key).max_retries(10).enqueue()
    recovered = scheduler.job(flaky).args(key + "f", 2).max_retries(10).enqueue()
    stats = container.worker().run_until_idle(30)
    assert stats.idle
    assert _job(container, rejected).status is JobStatus.FAILED
    assert ATTEMPTS[key] == 1, "a @DoNotRetry error was retried"
    done = _job(container, recovered)
    assert (done.status, done.attempt, ATTEMPTS[key + "f"]) == (JobStatus.SUCCEEDED, 3, 3)


# ---------------------------------------------------------------- ResilienceStrategy


class Resilience4jStrategy:
    """The seed's example on the port's own breaker (``CircuitBreaker.ofDefaults``)."""

    def __init__(self) -> None:
        self.breakers: dict[str, CircuitBreaker] = {}
        self.executed: list[str] = []

    def execute(self, service_name: str, task: Callable[[], T]) -> T:
        cb = self.breakers.setdefault(
            service_name, CircuitBreaker(service_name, CircuitBreakerConfig())
        )
        self.executed.append(service_name)
        return cb.call(task, cb.config.exception_filter())

    def is_service_available(self, service_name: str) -> bool:
        cb = self.breakers.get(service_name)
        return cb is None or cb.state is not CircuitState.OPEN


def test_resilience4j_style_strategy_runs_guarded_jobs(sqlite_url: str) -> None:
    container = _register(_container(sqlite_url), ResilienceStrategy, Resilience4jStrategy)
    scheduler = container.scheduler()
    sync_id = scheduler.enqueue(call_mail_service, 21)
    async_id = scheduler.enqueue(call_mail_service_async, 5)
    stats = container.worker().run_until_idle(30)
    assert stats.idle and stats.failed == 0
    for job_id in (sync_id, async_id):
        assert _job(container, job_id).status is JobStatus.SUCCEEDED
    assert container.scheduler().detail(sync_id).result == 42
    assert container.scheduler().detail(async_id).result == 15
    strategy = container.resilience_strategy().__wrapped__
    assert strategy.executed == ["seed-mail", "seed-mail"], "the async job bypassed the strategy"


def test_an_open_circuit_defers_the_job_by_the_30_second_default(sqlite_url: str) -> None:
    container = _register(_container(sqlite_url), ResilienceStrategy, Resilience4jStrategy)
    strategy = container.resilience_strategy().__wrapped__
    opened = CircuitBreaker("seed-mail", CircuitBreakerConfig())
    for _ in range(opened.config.minimum_calls):
        opened.record_failure()
    strategy.breakers["seed-mail"] = opened
    job_id = container.scheduler().enqueue(call_mail_service, 1)
    before = container.job_store().server_now()
    stats = container.worker().run_until_idle(10)
    assert stats.deferred == 1 and stats.failed == 0
    job = _job(container, job_id)
    after = container.job_store().server_now()
    assert (job.status, job.attempt, job.owner) == (JobStatus.PENDING, 0, None)
    # due again 30 s after the rejection, which happened between before and after (a second
    # either way absorbs the stored timestamps' precision)
    assert before + timedelta(seconds=29) <= job.scheduled_at <= after + timedelta(seconds=31)


# ---------------------------------------------------------------- ClassPolicy


class StrictClassPolicy:
    ALLOWED_PREFIXES = ("ratchet_", "tests.", "builtins.", "datetime.")

    def is_allowed(self, class_name: str) -> bool:
        return any(class_name.startswith(prefix) for prefix in self.ALLOWED_PREFIXES)


def test_strict_class_policy(sqlite_url: str) -> None:
    container = _register(_container(sqlite_url), ClassPolicy, StrictClassPolicy)
    scheduler = container.scheduler()
    allowed = scheduler.enqueue(add, 2, 3)
    with pytest.raises(ClassNotAllowedError, match="json"):
        scheduler.enqueue(json.dumps, [1])
    container.worker().run_until_idle(20)
    assert _job(container, allowed).status is JobStatus.SUCCEEDED


# ---------------------------------------------------------------- ErrorSanitizer


class PiiSanitizer:
    MAX_LENGTH = 2000

    def sanitize(self, error: BaseException) -> str:
        cls = type(error)
        msg = f"{cls.__module__}.{cls.__qualname__}: {error}"
        msg = re.sub(r"api[_-]?key=\w+", "api_key=***", msg)
        msg = re.sub(r"password=\S+", "password=***", msg)
        msg = re.sub(r"[\w.]+@[\w.]+", "***@***", msg)
        return msg[: self.MAX_LENGTH]


def test_pii_sanitizer(sqlite_url: str) -> None:
    container = _register(_container(sqlite_url), ErrorSanitizer, PiiSanitizer)
    job_id = container.scheduler().job(leak_secrets).max_retries(0).enqueue()
    container.worker().run_until_idle(20)
    assert _job(container, job_id).status is JobStatus.FAILED
    error = container.scheduler().detail(job_id).error
    assert "builtins.ValueError: login failed: api_key=*** password=*** user ***@***" in error
    for secret in ("abc123", "hunter2", "bob@example.com"):
        assert secret not in error


# ---------------------------------------------------------------- ExecutorProvider


class VirtualThreadExecutorProvider:
    """The job executor of the seed's example (no scheduled executor exists in this port)."""

    def job_executor(self, max_workers: int) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="seed-jobs")


def test_executor_provider(sqlite_url: str) -> None:
    container = _register(_container(sqlite_url), ExecutorProvider, VirtualThreadExecutorProvider)
    job_id = container.scheduler().enqueue(thread_name)
    container.worker().run_until_idle(20)
    assert container.scheduler().detail(job_id).result.startswith("seed-jobs")


# ---------------------------------------------------------------- BeanResolver


class SpringBeanResolver:
    """``resolve`` only: ``validate_resolvable`` and ``acquire`` are the SPI's defaults."""

    def __init__(self) -> None:
        self.application_context: dict[type[Any], Any] = {InvoiceService: InvoiceService("INV")}

    def resolve(self, cls: type[T]) -> T:
        try:
            return self.application_context[cls]  # type: ignore[no-any-return]
        except KeyError:
            raise LookupError(f"no bean of type {cls.__qualname__}") from None


def test_resolve_only_bean_resolver(sqlite_url: str) -> None:
    container = _register(_container(sqlite_url), BeanResolver, SpringBeanResolver)
    job_id = container.scheduler().enqueue(InvoiceService.number, 9)
    container.worker().run_until_idle(20)
    assert container.scheduler().detail(job_id).result == "INV-9"


# ---------------------------------------------------------------- MetricsCollector


class PartialMetricsCollector(NoOpMetricsCollector):
    """The seed's partial Micrometer collector, on a dict of counters."""

    def __init__(self) -> None:
        self.counters: dict[str, int] = {}
        self.lock = threading.Lock()

    def _inc(self, name: str) -> None:
        with self.lock:
            self.counters[name] = self.counters.get(name, 0) + 1

    def job_started(self, job_id: uuid.UUID, job_type: JobType, priority: int) -> None:
        self._inc(f"ratchet.jobs.started[{job_type.value}]")

    def job_completed(self, job_id: uuid.UUID, job_type: JobType, execution_time_ms: int) -> None:
        self._inc(f"ratchet.jobs.completed[{job_type.value}]")

    def job_failed(
        self, job_id: uuid.UUID, job_type: JobType, cause: BaseException, attempt: int
    ) -> None:
        self._inc(f"ratchet.jobs.failed[{job_type.value},{type(cause).__name__}]")


def test_partial_metrics_collector(sqlite_url: str) -> None:
    container = _register(_container(sqlite_url), MetricsCollector, PartialMetricsCollector)
    scheduler = container.scheduler()
    scheduler.enqueue(add, 1, 2)
    scheduler.job(leak_secrets).max_retries(0).enqueue()
    container.worker().run_until_idle(20)
    counters = container.metrics_collector().counters
    assert counters == {
        "ratchet.jobs.started[STANDARD]": 2,
        "ratchet.jobs.completed[STANDARD]": 1,
        "ratchet.jobs.failed[STANDARD,ValueError]": 1,
    }


# ---------------------------------------------------------------- JobLogger


class StructuredJobLogger:
    def __init__(self, lines: list[str]) -> None:
        self._lines = lines

    def info(self, message: str) -> None:
        self._log_json("INFO", message)

    def debug(self, message: str) -> None:
        self._log_json("DEBUG", message)

    def warn(self, message: str) -> None:
        self._log_json("WARN", message)

    def error(self, message: str) -> None:
        self._log_json("ERROR", message)

    def trace(self, message: str) -> None:
        self._log_json("TRACE", message)

    def _log_json(self, level: str, message: str) -> None:
        timestamp = datetime.now(UTC).isoformat()
        self._lines.append(json.dumps({"level": level, "message": message, "timestamp": timestamp}))


class StructuredJobLoggerFactory:
    """The JobLogger is bound per execution through its factory SPI."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def create(self, context: JobLoggerContext) -> StructuredJobLogger:
        return StructuredJobLogger(self.lines)


def test_structured_job_logger(sqlite_url: str) -> None:
    container = _register(_container(sqlite_url), JobLoggerFactory, StructuredJobLoggerFactory)
    container.scheduler().enqueue(log_twice, 12)
    container.worker().run_until_idle(20)
    records = [json.loads(line) for line in container.job_logger_factory().lines]
    assert [(r["level"], r["message"]) for r in records] == [
        ("INFO", "processing order 12"),
        ("WARN", "stock is low"),
    ]


# ---------------------------------------------------------------- NodeIdentityProvider


class KubernetesNodeProvider:
    def get_node_id(self) -> str:
        return os.environ["HOSTNAME"]  # Kubernetes pod name


def test_kubernetes_node_provider(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, make_worker: Callable[..., Any]
) -> None:
    pod = f"billing-{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("HOSTNAME", pod)
    container = _register(_container(sqlite_url), NodeIdentityProvider, KubernetesNodeProvider)
    worker = make_worker(container)
    worker.start()
    store = container.job_store()
    # the worker registers its node (the identity the SPI's default builds from get_node_id)
    wait_for(lambda: pod in {n.node_id for n in store.find_all_nodes()}, 30, "the node row")
    job_id = container.scheduler().enqueue(add, 4, 4)
    wait_for(lambda: _job(container, job_id).status is JobStatus.SUCCEEDED, 30, "the job")
    assert _job(container, job_id).owner in (pod, None)


# ---------------------------------------------------------------- SchedulerLifecycleHook


HOOK_CALLS: list[str] = []


class WarmCachesHook:
    """One method of four: the others are the SPI's no-op defaults."""

    def before_start(self) -> None:
        HOOK_CALLS.append("before_start")


def test_a_hook_with_one_method(sqlite_url: str) -> None:
    HOOK_CALLS.clear()
    container = _register(_container(sqlite_url), SchedulerLifecycleHook, WarmCachesHook)
    job_id = container.scheduler().enqueue(add, 1, 1)
    stats = container.worker().run_until_idle(20)
    assert stats.idle and _job(container, job_id).status is JobStatus.SUCCEEDED
    assert HOOK_CALLS == ["before_start"]


# ---------------------------------------------------------------- LambdaAnalyzer


class FunctionMetadataAnalyzer:
    """The seed's AsmLambdaAnalyzer: Python needs no bytecode analysis, the function says
    where it lives."""

    def analyze(self, target: Callable[..., Any]) -> LambdaDescriptor:
        return LambdaDescriptor(
            target_module=target.__module__,
            qualname=target.__qualname__,
            signature=str(inspect.signature(target)),
            is_static=True,
            runtime_arg_indexes=None,  # no runtime parameter slots in this example
        )


def test_lambda_analyzer_override_is_what_the_container_hands_out(sqlite_url: str) -> None:
    container = _register(_container(sqlite_url), LambdaAnalyzer, FunctionMetadataAnalyzer)
    described = container.lambda_analyzer().analyze(add)
    assert (described.target_module, described.qualname) == (__name__, "add")
    assert described.signature == "(a: 'int', b: 'int') -> 'int'"


# ---------------------------------------------------------------- ClusterCoordinator


class RedisClusterCoordinator:
    """The seed's example on redis-py: wake-ups are published on a channel and every
    subscriber's listener receives a ``JobWakeupHint``."""

    def __init__(self, channel: str) -> None:
        import redis

        self._redis = redis.Redis(host="127.0.0.1", port=6379)
        self._channel = channel
        self._pubsub: Any = None
        self._thread: Any = None
        self.subscribed = threading.Event()

    def notify_new_work(
        self, priority: int, source: NodeIdentity, execution_target: str | None
    ) -> None:
        message = {"priority": priority, "node": source.node_id, "target": execution_target}
        self._redis.publish(self._channel, json.dumps(message))

    def register_wakeup_listener(self, listener: Callable[[JobWakeupHint], None]) -> None:
        def deliver(message: dict[str, Any]) -> None:
            data = json.loads(message["data"])
            listener(
                JobWakeupHint(
                    priority=data["priority"],
                    source=NodeIdentity(node_id=data["node"]),
                    execution_target=data["target"],
                )
            )

        self._pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        self._pubsub.subscribe(**{self._channel: deliver})
        self._thread = self._pubsub.run_in_thread(sleep_time=0.05, daemon=True)
        self.subscribed.set()

    def close(self) -> None:
        if self._thread is not None:
            self._thread.stop()
            self._thread.join(5)
        if self._pubsub is not None:
            self._pubsub.close()
        self._redis.close()


@pytest.fixture
def redis_channel() -> Iterator[str]:
    redis = pytest.importorskip("redis")
    client = redis.Redis(host="127.0.0.1", port=6379)
    try:
        client.ping()
    except redis.exceptions.ConnectionError:
        pytest.skip("no Redis on 127.0.0.1:6379")
    finally:
        client.close()
    yield f"ratchet-seed-{uuid.uuid4().hex}"


def test_redis_cluster_coordinator_wakes_an_idle_worker(
    sqlite_url: str, redis_channel: str, make_worker: Callable[..., Any]
) -> None:
    def coordinator() -> Any:
        return providers.Singleton(RedisClusterCoordinator, redis_channel)

    # The worker's node: it polls once a minute, so only a wake-up starts the job in time.
    worker_side = _register(_container(sqlite_url), ClusterCoordinator, coordinator())
    worker = make_worker(worker_side, polling=SLOW_POLL)
    worker.start()
    assert worker_side.cluster_coordinator().subscribed.wait(10)
    time.sleep(0.3)  # the first (empty) poll is over: the worker now waits 60 s
    # The submitting node publishes through its own coordinator.
    submitter = _register(_container(sqlite_url), ClusterCoordinator, coordinator())
    try:
        job_id = submitter.scheduler().enqueue(add, 20, 22)
        wait_for(
            lambda: _job(submitter, job_id).status is JobStatus.SUCCEEDED,
            30,
            "the job woken through Redis",
        )
    finally:
        worker.stop(timeout=5)
        submitter.cluster_coordinator().close()
        worker_side.cluster_coordinator().close()
