"""The table of Ratchet's SPIs and the providers that hold them, and :class:`ImportTarget`.

Its own module so that the container (which builds providers from it) and the alternatives
registry (which validates registrations against it) both depend on it instead of on each other.
``ratchet_core.runtime.container`` re-exports every name for existing imports.
"""

from __future__ import annotations

import importlib
from typing import Any

import attrs

from ratchet_api.scheduler import InvocationSubmissionService, JobScheduler
from ratchet_api.spi import (
    AfterCommitRegistrar,
    BeanResolver,
    CircuitBreakerConfigProvider,
    ClassPolicy,
    ClusterCoordinator,
    ErrorSanitizer,
    ExecutionTuningProvider,
    ExecutorProvider,
    JobAuthorizationPolicy,
    JobInvocationResolver,
    JobLoggerFactory,
    KeyProvider,
    LambdaAnalyzer,
    MetricsCollector,
    NodeIdentityProvider,
    NodeTagAffinityProvider,
    PayloadEncryption,
    PayloadMaskingPolicy,
    PayloadSerializer,
    PollingStrategyProvider,
    PreExecutionArgResolver,
    RatchetConfig,
    ResilienceStrategy,
    ResultPersistenceStrategy,
    RetryPolicy,
    SchedulerLifecycleHook,
    StartupCoordinator,
    TargetLoader,
)
from ratchet_api.store.protocols import JobStore


@attrs.frozen
class ImportTarget:
    """A callable named by a dotted path (``package.module.Name`` or ``package.module.Cls.attr``),
    imported on first call. Used as the ``provides`` of default providers so that a module is
    only imported when its provider is first used."""

    path: str

    def resolve(self) -> Any:
        """Import and return the named object; ``ImportError`` names the path if it is absent."""
        parts = self.path.split(".")
        for split in range(len(parts) - 1, 0, -1):
            module_name = ".".join(parts[:split])
            try:
                obj: Any = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:
                if exc.name is not None and module_name.startswith(exc.name):
                    continue
                raise
            try:
                for attr in parts[split:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                raise ImportError(
                    f"{self.path}: module {module_name} has no attribute {'.'.join(parts[split:])}"
                ) from None
            return obj
        raise ImportError(f"cannot import {self.path}: no such module")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    def __str__(self) -> str:
        return self.path

    def __deepcopy__(self, memo: dict[int, Any]) -> ImportTarget:
        # immutable: a container copied per worker (runtime/worker_parts.py) shares it
        return self


def lazy(path: str) -> ImportTarget:
    """Shorthand for :class:`ImportTarget`."""
    return ImportTarget(path)


@attrs.frozen
class SpiBinding:
    """An SPI, the provider that holds it and whether it is multi-valued."""

    spi: type[Any]
    provider_name: str
    multi: bool = False

    @property
    def spi_name(self) -> str:
        return self.spi.__name__


SPI_BINDINGS: tuple[SpiBinding, ...] = (
    SpiBinding(RatchetConfig, "settings"),
    SpiBinding(RetryPolicy, "retry_policy"),
    SpiBinding(ResilienceStrategy, "resilience_strategy"),
    SpiBinding(CircuitBreakerConfigProvider, "circuit_breaker_config_provider"),
    SpiBinding(ClassPolicy, "class_policy"),
    SpiBinding(ErrorSanitizer, "error_sanitizer"),
    SpiBinding(PayloadMaskingPolicy, "payload_masking_policy"),
    SpiBinding(PayloadEncryption, "payload_encryption"),
    SpiBinding(KeyProvider, "key_provider"),
    SpiBinding(PayloadSerializer, "payload_serializer"),
    SpiBinding(ResultPersistenceStrategy, "result_persistence_strategy"),
    SpiBinding(JobInvocationResolver, "job_invocation_resolver"),
    SpiBinding(TargetLoader, "target_loader"),
    SpiBinding(LambdaAnalyzer, "lambda_analyzer"),
    SpiBinding(PreExecutionArgResolver, "pre_execution_arg_resolver"),
    SpiBinding(ExecutionTuningProvider, "execution_tuning_provider"),
    SpiBinding(PollingStrategyProvider, "polling_strategy_provider"),
    SpiBinding(ExecutorProvider, "executor_provider"),
    SpiBinding(JobLoggerFactory, "job_logger_factory"),
    SpiBinding(MetricsCollector, "metrics_collector"),
    SpiBinding(ClusterCoordinator, "cluster_coordinator"),
    SpiBinding(StartupCoordinator, "startup_coordinator"),
    SpiBinding(NodeIdentityProvider, "node_identity_provider"),
    SpiBinding(NodeTagAffinityProvider, "node_tag_affinity_provider"),
    SpiBinding(BeanResolver, "bean_resolver"),
    SpiBinding(AfterCommitRegistrar, "after_commit_registrar"),
    SpiBinding(SchedulerLifecycleHook, "lifecycle_hooks", multi=True),
    SpiBinding(JobStore, "job_store"),
    SpiBinding(JobScheduler, "scheduler"),
    SpiBinding(JobAuthorizationPolicy, "job_authorization_policy"),
    SpiBinding(InvocationSubmissionService, "invocation_submission_service"),
)
"""Every SPI the container binds, in display order."""


def binding_for(spi: type[Any]) -> SpiBinding:
    """The binding of ``spi``; ``LookupError`` naming it if the container has no provider."""
    for binding in SPI_BINDINGS:
        if binding.spi is spi:
            return binding
    known = ", ".join(b.spi_name for b in SPI_BINDINGS)
    raise LookupError(f"{getattr(spi, '__name__', spi)!s} is not an SPI of Ratchet; known: {known}")


__all__ = ["SPI_BINDINGS", "ImportTarget", "SpiBinding", "binding_for", "lazy"]
