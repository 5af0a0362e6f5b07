"""Policy SPIs: retry, resilience, class allowlist, error sanitizing, payload masking."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Protocol, TypeVar, runtime_checkable

from ratchet_api.model import (
    CircuitBreakerConfig,
    CircuitBreakerExceptionFilter,
    CircuitBreakerProfile,
    JobAuthorizationRequest,
    MaskingContext,
)

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


@runtime_checkable
class ResilienceStrategy(Protocol):
    """Wraps job execution with resilience patterns (circuit breakers). Thread safe."""

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

    async def execute_async(
        self,
        service_name: str,
        task: Callable[[], Awaitable[T]],
        exception_filter: CircuitBreakerExceptionFilter | None = None,
    ) -> T:
        """``execute`` for ``async def`` targets."""
        ...

    def is_service_available(self, service_name: str) -> bool:
        """Advisory pre-check: False while the circuit is open."""
        ...

    def get_retry_delay(self, service_name: str) -> timedelta:
        """Delay before retrying work rejected by an open circuit (never negative; default 30 s)."""
        ...


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
    is stored or what the worker receives. Thread safe."""

    def is_sensitive_field(self, field_name: str, context: MaskingContext | None = None) -> bool:
        """True to mask. ``context`` (the owning job and its properties) allows per-job
        decisions; name-only policies ignore it."""
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
    "CircuitBreakerConfigProvider",
    "ClassPolicy",
    "ErrorSanitizer",
    "JobAuthorizationPolicy",
    "PayloadMaskingPolicy",
    "ResilienceStrategy",
    "RetryPolicy",
]
