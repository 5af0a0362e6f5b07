"""Policy SPIs: retry, resilience, class allowlist, error sanitizing, payload masking."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Protocol, TypeVar, runtime_checkable

from ratchet_api.model import (
    CircuitBreakerConfig,
    CircuitBreakerExceptionFilter,
    CircuitBreakerProfile,
    JobAuthorizationRequest,
    MaskingContext,
)
from ratchet_api.spi._optional import optional_member

T = TypeVar("T")


@runtime_checkable
class RetryPolicy(Protocol):
    """Global retry decisions, consulted after every failed attempt. Thread safe.

    The default (``DefaultRetryPolicy``) defers to the job's own ``max_retries`` and backoff; the
    engine calls it with the job's values bound, so an override sees the attempt and cause only.
    """

    def should_retry(self, attempt: int, cause: BaseException) -> bool:
        """True to retry. ``attempt`` is the number of the attempt that failed, from 1."""
        ...

    def get_delay(self, attempt: int) -> timedelta:
        """Delay before the next attempt (never negative). ``attempt`` from 1."""
        ...


DEFAULT_CIRCUIT_RETRY_DELAY = timedelta(seconds=30)
"""``ResilienceStrategy.get_retry_delay``'s default: how long work rejected by an open circuit
waits before it is due again."""


def accepts_exception_filter(execute: Callable[..., Any]) -> bool:
    """True if ``execute`` (a bound ``ResilienceStrategy.execute``) takes the exception filter
    as a third argument; False for the Java original's two-argument form
    ``execute(service_name, task)``."""
    try:
        signature = inspect.signature(execute)
    except (TypeError, ValueError):  # a builtin or C callable: assume the full form
        return True
    try:
        signature.bind("service", _no_task, None)
    except TypeError:
        return False
    return True


def _no_task() -> None:
    return None


def execute_with_filter(
    strategy: Any,
    service_name: str,
    task: Callable[[], T],
    exception_filter: CircuitBreakerExceptionFilter | None,
) -> T:
    """``strategy.execute(service_name, task, exception_filter)``, or without the filter when
    the strategy's ``execute`` has the two-argument form (the Java original's default for the
    filtered ``execute`` delegates to it and ignores the filter)."""
    execute = strategy.execute
    if accepts_exception_filter(execute):
        return execute(service_name, task, exception_filter)  # type: ignore[no-any-return]
    return execute(service_name, task)  # type: ignore[no-any-return]


async def _awaited(task: Callable[[], Awaitable[T]]) -> T:
    return await task()


@runtime_checkable
class ResilienceStrategy(Protocol):
    """Wraps job execution with resilience patterns (circuit breakers). Thread safe.

    Required: ``execute`` and ``is_service_available``. Optional, with the defaults written
    here: ``execute_async`` and ``get_retry_delay`` (30 s). ``execute`` may also have the Java
    original's two-argument form ``execute(service_name, task)``: it is then called without the
    exception filter.
    """

    def execute(
        self,
        service_name: str,
        task: Callable[[], T],
        exception_filter: CircuitBreakerExceptionFilter | None = None,
    ) -> T:
        """Run ``task`` under the breaker of ``service_name``. Raises
        ``CircuitBreakerOpenError`` when the circuit rejects the call; re-raises the task's own
        error unchanged. ``exception_filter`` (from the target's ``@circuit_breaker``) decides
        which errors count; the built-in strategy merges it with the configured filter."""
        ...

    @optional_member
    async def execute_async(
        self,
        service_name: str,
        task: Callable[[], Awaitable[T]],
        exception_filter: CircuitBreakerExceptionFilter | None = None,
    ) -> T:
        """``execute`` for ``async def`` targets.

        Default: the coroutine runs under the strategy's own ``execute``, so its breaker counts
        async jobs too. ``execute`` is called on a helper thread (``asyncio.to_thread``) with a
        task that runs the coroutine on the caller's event loop and waits for it; cancelling
        the caller cancels the coroutine. It costs one thread per guarded async job while it
        runs: a strategy with native async support overrides this method."""
        loop = asyncio.get_running_loop()
        started: list[concurrent.futures.Future[T]] = []
        cancelled = threading.Event()
        lock = threading.Lock()

        def run_on_the_loop() -> T:
            future = asyncio.run_coroutine_threadsafe(_awaited(task), loop)
            # the caller may be cancelled before this thread records the future: the lock and
            # the flag make sure the coroutine is cancelled either way
            with lock:
                started.append(future)
                if cancelled.is_set():
                    future.cancel()
            return future.result()

        try:
            return await asyncio.to_thread(
                execute_with_filter, self, service_name, run_on_the_loop, exception_filter
            )
        except asyncio.CancelledError:
            with lock:
                cancelled.set()
                for future in started:
                    future.cancel()
            raise

    def is_service_available(self, service_name: str) -> bool:
        """Advisory pre-check: False while the circuit is open."""
        ...

    @optional_member
    def get_retry_delay(self, service_name: str) -> timedelta:
        """Delay before retrying work rejected by an open circuit. Must be a ``timedelta`` of
        zero or more (never None or negative). Default: 30 seconds
        (``DEFAULT_CIRCUIT_RETRY_DELAY``)."""
        return DEFAULT_CIRCUIT_RETRY_DELAY


@runtime_checkable
class CircuitBreakerConfigProvider(Protocol):
    """Enablement and per-profile settings of the built-in circuit breaker."""

    def is_enabled(self) -> bool: ...

    def config_for(self, profile: CircuitBreakerProfile) -> CircuitBreakerConfig: ...


@runtime_checkable
class ClassPolicy(Protocol):
    """Security allowlist: which classes a payload may name and which targets may run.

    Called with dotted names (``myapp.models.Order``) at enqueue and again at dispatch. Builtins
    and standard containers are never sent. Thread safe; must return False for an empty name.
    """

    def is_allowed(self, class_name: str) -> bool: ...


@runtime_checkable
class ErrorSanitizer(Protocol):
    """Turns an exception into the text persisted as the job's error. Must keep the exception
    class name, strip secrets (credentials, URLs with userinfo, emails, tokens), bound the length
    and never raise or return None. Thread safe."""

    def sanitize(self, error: BaseException) -> str: ...


@runtime_checkable
class PayloadMaskingPolicy(Protocol):
    """Which fields the read APIs mask when payload masking is enabled. It never changes what
    is stored or what the worker receives. Thread safe.

    Required: ``is_sensitive_field``. Its ``context`` parameter is optional: a name-only policy
    ``is_sensitive_field(field_name)`` (the Java original's first form) keeps working, it is
    then called with the field name alone."""

    def is_sensitive_field(self, field_name: str, context: MaskingContext | None = None) -> bool:
        """True to mask. ``context`` (the owning job and its properties) allows per-job
        decisions; name-only policies leave the parameter out."""
        ...


@runtime_checkable
class JobAuthorizationPolicy(Protocol):
    """Who may create and run which jobs. ``check_create`` runs when a job is about to be
    persisted (every creation path: builders, ``enqueue_many``, prepared invocations), before
    anything is written: raising ``JobAuthorizationError`` refuses the job and nothing is
    stored (for ``enqueue_many``, no job of the call). ``check_execute`` runs on the worker at
    dispatch, after the payload is decoded and before the target is called: raising
    ``JobAuthorizationError`` dead-letters the job unrun. Other exceptions propagate like any
    bug. Thread safe; called once per job, so keep it fast."""

    def check_create(self, request: JobAuthorizationRequest) -> None: ...

    def check_execute(self, request: JobAuthorizationRequest) -> None: ...


__all__ = [
    "DEFAULT_CIRCUIT_RETRY_DELAY",
    "CircuitBreakerConfigProvider",
    "ClassPolicy",
    "ErrorSanitizer",
    "JobAuthorizationPolicy",
    "PayloadMaskingPolicy",
    "ResilienceStrategy",
    "RetryPolicy",
    "accepts_exception_filter",
    "execute_with_filter",
]
