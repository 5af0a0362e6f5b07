"""Circuit breakers: the default ``ResilienceStrategy`` and its configuration provider.

One count-based sliding-window breaker per service name:

* CLOSED: calls run; each outcome counted by the exception filter enters a window of the last
  ``sliding_window_size`` outcomes. Once the window holds at least ``minimum_calls`` outcomes and
  the failure rate (percent) reaches ``failure_rate_threshold`` the breaker OPENs.
* OPEN: calls are rejected with ``CircuitBreakerOpenError`` until ``wait_duration_ms`` passed,
  then the breaker turns HALF_OPEN.
* HALF_OPEN: ``permitted_calls_in_half_open`` trial calls may run. When that many outcomes are
  recorded the breaker CLOSEs (fresh window) if their failure rate is below the threshold, else
  OPENs again. An ignored or unmatched exception (the filter returns None) counts as neither and
  gives its trial permit back; so does a call cancelled by ``BaseException`` (not ``Exception``).

Every error is re-raised unchanged. State changes are reported to
``MetricsCollector.circuit_breaker_state``.
"""

from __future__ import annotations

import enum
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from loguru import logger

from ratchet_api.errors import CircuitBreakerOpenError
from ratchet_api.model import (
    CircuitBreakerConfig,
    CircuitBreakerExceptionFilter,
    CircuitBreakerProfile,
)
from ratchet_api.spi import (
    DEFAULT_CIRCUIT_RETRY_DELAY,
    CircuitBreakerConfigProvider,
    RatchetConfig,
    RatchetConfigKey,
    ResilienceStrategy,
    default_of,
)
from ratchet_api.spi.policies import accepts_exception_filter
from ratchet_core.runtime.config import (
    parse_bool,
    parse_duration,
    parse_float,
    parse_int,
    register_key,
)

T = TypeVar("T")


class CircuitState(enum.StrEnum):
    CLOSED = "CLOSED"
    OPEN = "OPEN"
    HALF_OPEN = "HALF_OPEN"


# ---------------------------------------------------------------- configuration keys

CIRCUIT_BREAKER_ENABLED = register_key(
    RatchetConfigKey(
        "circuit_breaker.enabled",
        parse_bool,
        True,
        "Run job targets marked @circuit_breaker under a breaker (false: call them directly).",
    )
)

_PROFILE_DEFAULTS: dict[CircuitBreakerProfile, CircuitBreakerConfig] = {
    CircuitBreakerProfile.JOB: CircuitBreakerConfig(),
    CircuitBreakerProfile.POLLER: CircuitBreakerConfig(
        failure_rate_threshold=50.0,
        sliding_window_size=10,
        minimum_calls=5,
        wait_duration_ms=5_000,
        permitted_calls_in_half_open=1,
    ),
}


def _profile_prefix(profile: CircuitBreakerProfile) -> str:
    return "circuit_breaker" if profile is CircuitBreakerProfile.JOB else "circuit_breaker.poller"


def _profile_keys(profile: CircuitBreakerProfile) -> dict[str, RatchetConfigKey[Any]]:
    prefix = _profile_prefix(profile)
    d = _PROFILE_DEFAULTS[profile]
    what = "job-target breakers" if profile is CircuitBreakerProfile.JOB else "the poller breaker"
    return {
        "failure_rate_threshold": register_key(
            RatchetConfigKey(
                f"{prefix}.failure_rate_threshold",
                parse_float(minimum=0.01, maximum=100.0),
                d.failure_rate_threshold,
                f"Failure rate (percent) that opens {what}.",
            )
        ),
        "sliding_window_size": register_key(
            RatchetConfigKey(
                f"{prefix}.sliding_window_size",
                parse_int(minimum=1),
                d.sliding_window_size,
                f"Number of recent calls the failure rate of {what} is computed over.",
            )
        ),
        "minimum_calls": register_key(
            RatchetConfigKey(
                f"{prefix}.minimum_calls",
                parse_int(minimum=1),
                d.minimum_calls,
                f"Calls recorded before {what} may open.",
            )
        ),
        "wait_duration": register_key(
            RatchetConfigKey(
                f"{prefix}.wait_duration",
                parse_duration,
                timedelta(milliseconds=d.wait_duration_ms),
                f"How long {what} stay open before trial calls (e.g. 30s, 500ms).",
            )
        ),
        "permitted_calls_in_half_open": register_key(
            RatchetConfigKey(
                f"{prefix}.permitted_calls_in_half_open",
                parse_int(minimum=1),
                d.permitted_calls_in_half_open,
                f"Trial calls of {what} in HALF_OPEN before deciding to close or re-open.",
            )
        ),
    }


_KEYS_BY_PROFILE = {profile: _profile_keys(profile) for profile in CircuitBreakerProfile}


class DefaultCircuitBreakerConfigProvider:
    """Settings-backed breaker configuration: ``circuit_breaker.*`` for job breakers and
    ``circuit_breaker.poller.*`` for the poller's."""

    def __init__(self, settings: RatchetConfig) -> None:
        self._settings = settings

    def is_enabled(self) -> bool:
        return self._settings.get(CIRCUIT_BREAKER_ENABLED)

    def config_for(self, profile: CircuitBreakerProfile) -> CircuitBreakerConfig:
        keys = _KEYS_BY_PROFILE[profile]
        get = self._settings.get
        wait: timedelta = get(keys["wait_duration"])
        return CircuitBreakerConfig(
            failure_rate_threshold=get(keys["failure_rate_threshold"]),
            sliding_window_size=get(keys["sliding_window_size"]),
            minimum_calls=get(keys["minimum_calls"]),
            wait_duration_ms=int(wait.total_seconds() * 1000),
            permitted_calls_in_half_open=get(keys["permitted_calls_in_half_open"]),
        )


# ---------------------------------------------------------------- the breaker


class CircuitBreaker:
    """One count-based sliding-window breaker (see the module docstring). Thread safe.

    ``on_state_change(name, old, new)`` is called outside the lock; its errors are logged.
    ``clock`` returns monotonic seconds (injectable for tests).
    """

    def __init__(
        self,
        name: str,
        config: CircuitBreakerConfig,
        *,
        on_state_change: Callable[[str, CircuitState, CircuitState], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.config = config
        self._on_state_change = on_state_change
        self._clock = clock
        self._lock = threading.Lock()
        self._state = CircuitState.CLOSED
        self._window: deque[bool] = deque(maxlen=config.sliding_window_size)
        self._opened_at = 0.0
        self._half_open_permits = 0
        self._half_open_outcomes: list[bool] = []

    @property
    def state(self) -> CircuitState:
        with self._lock:
            transition = self._maybe_half_open()
        self._notify(transition)
        return self._state

    def failure_rate(self) -> float:
        """Percent of failures in the current window (0 when empty)."""
        with self._lock:
            return self._rate(list(self._window))

    @staticmethod
    def _rate(outcomes: list[bool]) -> float:
        return 100.0 * sum(outcomes) / len(outcomes) if outcomes else 0.0

    def remaining_open_time(self) -> timedelta:
        """Time until an OPEN breaker lets trial calls through (zero when not open)."""
        with self._lock:
            if self._state is not CircuitState.OPEN:
                return timedelta(0)
            left = self._opened_at + self.config.wait_duration_ms / 1000 - self._clock()
            return timedelta(seconds=max(0.0, left))

    def _maybe_half_open(self) -> tuple[CircuitState, CircuitState] | None:
        if (
            self._state is CircuitState.OPEN
            and self._clock() - self._opened_at >= self.config.wait_duration_ms / 1000
        ):
            return self._transition(CircuitState.HALF_OPEN)
        return None

    def _transition(self, new: CircuitState) -> tuple[CircuitState, CircuitState]:
        old = self._state
        self._state = new
        if new is CircuitState.OPEN:
            self._opened_at = self._clock()
        elif new is CircuitState.HALF_OPEN:
            self._half_open_permits = 0
            self._half_open_outcomes = []
        else:
            self._window.clear()
        return old, new

    def _notify(self, transition: tuple[CircuitState, CircuitState] | None) -> None:
        if transition is None or self._on_state_change is None:
            return
        try:
            self._on_state_change(self.name, *transition)
        except Exception as exc:  # noqa: BLE001 - a metrics failure must not break calls
            logger.warning("circuit breaker {} state callback failed: {!r}", self.name, exc)

    def try_acquire(self) -> bool:
        """Permission for one call (a HALF_OPEN trial permit is taken). False when open."""
        with self._lock:
            transition = self._maybe_half_open()
            if self._state is CircuitState.CLOSED:
                allowed = True
            elif self._state is CircuitState.HALF_OPEN:
                allowed = self._half_open_permits < self.config.permitted_calls_in_half_open
                if allowed:
                    self._half_open_permits += 1
            else:
                allowed = False
        self._notify(transition)
        return allowed

    def is_call_permitted(self) -> bool:
        """True unless OPEN (and still waiting) or HALF_OPEN with every permit taken."""
        with self._lock:
            transition = self._maybe_half_open()
            if self._state is CircuitState.OPEN:
                permitted = False
            elif self._state is CircuitState.HALF_OPEN:
                permitted = self._half_open_permits < self.config.permitted_calls_in_half_open
            else:
                permitted = True
        self._notify(transition)
        return permitted

    def record_success(self) -> None:
        self._record(False)

    def record_failure(self) -> None:
        self._record(True)

    def release(self) -> None:
        """Give back a permit without an outcome (ignored exception, cancelled call)."""
        with self._lock:
            if self._state is CircuitState.HALF_OPEN and self._half_open_permits > 0:
                self._half_open_permits -= 1

    def _record(self, failure: bool) -> None:
        transition = None
        with self._lock:
            cfg = self.config
            if self._state is CircuitState.CLOSED:
                self._window.append(failure)
                if (
                    len(self._window) >= cfg.minimum_calls
                    and self._rate(list(self._window)) >= cfg.failure_rate_threshold
                ):
                    transition = self._transition(CircuitState.OPEN)
            elif self._state is CircuitState.HALF_OPEN:
                self._half_open_outcomes.append(failure)
                if len(self._half_open_outcomes) >= cfg.permitted_calls_in_half_open:
                    failed = self._rate(self._half_open_outcomes) >= cfg.failure_rate_threshold
                    transition = self._transition(
                        CircuitState.OPEN if failed else CircuitState.CLOSED
                    )
            # An outcome arriving while OPEN (a call admitted before it opened) is dropped.
        self._notify(transition)

    def _outcome(
        self, error: BaseException, exception_filter: CircuitBreakerExceptionFilter
    ) -> None:
        if not isinstance(error, Exception):
            self.release()
            return
        if exception_filter.classify(error):
            self.record_failure()
        else:
            self.release()

    def call(self, task: Callable[[], T], exception_filter: CircuitBreakerExceptionFilter) -> T:
        if not self.try_acquire():
            raise CircuitBreakerOpenError(self.name)
        try:
            result = task()
        except BaseException as error:
            self._outcome(error, exception_filter)
            raise
        self.record_success()
        return result

    async def call_async(
        self, task: Callable[[], Awaitable[T]], exception_filter: CircuitBreakerExceptionFilter
    ) -> T:
        if not self.try_acquire():
            raise CircuitBreakerOpenError(self.name)
        try:
            result = await task()
        except BaseException as error:
            self._outcome(error, exception_filter)
            raise
        self.record_success()
        return result


class DefaultResilienceStrategy:
    """One :class:`CircuitBreaker` per service name, created on first use with the JOB
    profile's configuration. The target's filter (``@circuit_breaker``) is merged with the
    configured one. When the config provider says disabled, tasks run directly. Thread safe."""

    def __init__(
        self,
        config_provider: CircuitBreakerConfigProvider,
        metrics: Any = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config_provider = config_provider
        self._metrics = metrics
        self._clock = clock
        self._breakers: dict[str, CircuitBreaker] = {}
        self._lock = threading.Lock()

    def breaker(self, service_name: str) -> CircuitBreaker:
        """The breaker of ``service_name`` (created on first use)."""
        if not service_name:
            raise ValueError("service_name must not be empty")
        with self._lock:
            existing = self._breakers.get(service_name)
            if existing is None:
                existing = CircuitBreaker(
                    service_name,
                    self._config_provider.config_for(CircuitBreakerProfile.JOB),
                    on_state_change=self._state_changed,
                    clock=self._clock,
                )
                self._breakers[service_name] = existing
            return existing

    def _state_changed(self, service: str, old: CircuitState, new: CircuitState) -> None:
        logger.info("circuit breaker {} changed from {} to {}", service, old.value, new.value)
        if self._metrics is not None:
            self._metrics.circuit_breaker_state(service, old.value, new.value)

    def _filter(
        self, breaker: CircuitBreaker, exception_filter: CircuitBreakerExceptionFilter | None
    ) -> CircuitBreakerExceptionFilter:
        configured = breaker.config.exception_filter()
        return configured if exception_filter is None else configured.merge(exception_filter)

    def execute(
        self,
        service_name: str,
        task: Callable[[], T],
        exception_filter: CircuitBreakerExceptionFilter | None = None,
    ) -> T:
        if not self._config_provider.is_enabled():
            return task()
        breaker = self.breaker(service_name)
        return breaker.call(task, self._filter(breaker, exception_filter))

    async def execute_async(
        self,
        service_name: str,
        task: Callable[[], Awaitable[T]],
        exception_filter: CircuitBreakerExceptionFilter | None = None,
    ) -> T:
        if not self._config_provider.is_enabled():
            return await task()
        breaker = self.breaker(service_name)
        return await breaker.call_async(task, self._filter(breaker, exception_filter))

    def is_service_available(self, service_name: str) -> bool:
        if not self._config_provider.is_enabled():
            return True
        return self.breaker(service_name).is_call_permitted()

    def get_retry_delay(self, service_name: str) -> timedelta:
        breaker = self.breaker(service_name)
        remaining = breaker.remaining_open_time()
        if remaining > timedelta(0):
            return remaining
        return timedelta(milliseconds=breaker.config.wait_duration_ms)


class ResilienceStrategyAdapter:
    """A ``ResilienceStrategy`` written as the Java original writes one, in the form the worker
    calls (``execute(service_name, task, exception_filter)``, ``execute_async``,
    ``get_retry_delay``):

    * a two-argument ``execute(service_name, task)`` is called without the filter (the
      original's filtered ``execute`` defaults to the two-argument one and ignores the filter);
    * a missing ``execute_async`` runs the coroutine under ``execute`` (the protocol's
      default, see ``ResilienceStrategy.execute_async``);
    * a missing ``get_retry_delay`` is 30 s (``DEFAULT_CIRCUIT_RETRY_DELAY``).

    Other attributes are read from the strategy (``__wrapped__``). Thread safe if it is."""

    def __init__(self, strategy: Any) -> None:
        self.__wrapped__ = strategy
        self._takes_filter = accepts_exception_filter(strategy.execute)
        own_async = getattr(strategy, "execute_async", None)
        self._own_async = own_async
        self._async_takes_filter = own_async is not None and accepts_exception_filter(own_async)

    def execute(
        self,
        service_name: str,
        task: Callable[[], T],
        exception_filter: CircuitBreakerExceptionFilter | None = None,
    ) -> T:
        if self._takes_filter:
            return self.__wrapped__.execute(service_name, task, exception_filter)  # type: ignore[no-any-return]
        return self.__wrapped__.execute(service_name, task)  # type: ignore[no-any-return]

    async def execute_async(
        self,
        service_name: str,
        task: Callable[[], Awaitable[T]],
        exception_filter: CircuitBreakerExceptionFilter | None = None,
    ) -> T:
        if self._own_async is None:
            default = default_of(ResilienceStrategy, "execute_async")
            return await default(self, service_name, task, exception_filter)  # type: ignore[no-any-return]
        if self._async_takes_filter:
            return await self._own_async(service_name, task, exception_filter)  # type: ignore[no-any-return]
        return await self._own_async(service_name, task)  # type: ignore[no-any-return]

    def is_service_available(self, service_name: str) -> bool:
        return bool(self.__wrapped__.is_service_available(service_name))

    def get_retry_delay(self, service_name: str) -> timedelta:
        own = getattr(self.__wrapped__, "get_retry_delay", None)
        if own is None:
            return DEFAULT_CIRCUIT_RETRY_DELAY
        return own(service_name)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        if name == "__wrapped__":
            raise AttributeError(name)
        return getattr(self.__wrapped__, name)

    def __repr__(self) -> str:
        return f"ResilienceStrategyAdapter({self.__wrapped__!r})"


def complete_strategy(strategy: Any) -> Any:
    """``strategy`` itself when it has every member in the form the worker calls, else a
    :class:`ResilienceStrategyAdapter` around it (the container applies this to every
    ``ResilienceStrategy`` alternative)."""
    if isinstance(strategy, ResilienceStrategyAdapter):
        return strategy
    own_async = getattr(strategy, "execute_async", None)
    if (
        own_async is not None
        and hasattr(strategy, "get_retry_delay")
        and accepts_exception_filter(strategy.execute)
        and accepts_exception_filter(own_async)
    ):
        return strategy
    return ResilienceStrategyAdapter(strategy)


__all__ = [
    "CIRCUIT_BREAKER_ENABLED",
    "CircuitBreaker",
    "CircuitState",
    "DefaultCircuitBreakerConfigProvider",
    "DefaultResilienceStrategy",
    "ResilienceStrategyAdapter",
    "complete_strategy",
]
