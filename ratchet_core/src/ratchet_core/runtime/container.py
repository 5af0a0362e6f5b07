"""The Ratchet container: one provider per SPI, bound to its default implementation.

Defaults are named by import strings and imported on first use (:class:`ImportTarget`), so
importing this module imports no engine module and no store. Alternatives registered on a
container instance (explicitly, by ``@alternative`` in configured modules, or by entry points)
take effect at :meth:`RatchetDynamicContainer.build`; see ``docs/overriding-an-spi.md``.

Usage::

    container = RatchetContainer(overrides={"store.url": "sqlite:///app.db"})
    container.alternatives.register(RetryPolicy, providers.Singleton(MyRetry),
                                    priority=Priority.APPLICATION)
    container.build()
    scheduler = container.scheduler()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from dependency_injector import containers, providers

from ratchet_core.runtime.bindings import (
    SPI_BINDINGS,
    ImportTarget,
    SpiBinding,
    binding_for,
    lazy,
)
from ratchet_core.runtime.worker_parts import WorkerParts

if TYPE_CHECKING:
    from ratchet_core.runtime.alternatives import AlternativeRegistry, SpiDescription


_ENTRY_PROVIDERS = frozenset({"scheduler", "worker"})


class RatchetDynamicContainer(containers.DynamicContainer):
    """The instance type of :class:`RatchetContainer`: providers plus the alternatives registry
    and the build step."""

    @property
    def alternatives(self) -> AlternativeRegistry:
        """The registry of this container's alternatives (created on first access)."""
        registry: AlternativeRegistry | None = self.__dict__.get("_ratchet_alternatives")
        if registry is None:
            from ratchet_core.runtime.alternatives import AlternativeRegistry

            registry = AlternativeRegistry(self)
            self.__dict__["_ratchet_alternatives"] = registry
        return registry

    def __getattribute__(self, name: str) -> Any:
        # The engine's entry providers build the container on first access, so alternatives
        # from entry points and configured modules apply even without an explicit build().
        if name in _ENTRY_PROVIDERS:
            state = object.__getattribute__(self, "__dict__")
            if not state.get("_ratchet_auto_building") and not state.get("_ratchet_auto_built"):
                state["_ratchet_auto_building"] = True
                try:
                    object.__getattribute__(self, "ensure_built")()
                finally:
                    state["_ratchet_auto_building"] = False
                state["_ratchet_auto_built"] = True
        return super().__getattribute__(name)

    def build(self) -> RatchetDynamicContainer:
        """Discover alternatives (explicit, ``alternatives.modules``, entry points), check them
        and override each SPI's provider with its highest-priority alternative. Idempotent: a
        second call re-applies from scratch. Raises ``DeploymentError`` subclasses
        (``AmbiguousAlternativeError``, ``NonConformingAlternativeError``)."""
        self.alternatives.apply()
        from ratchet_core.runtime.config import check_known_keys

        check_known_keys(self.settings())  # a typo in a setting is refused, never ignored
        return self

    apply_alternatives = build

    @property
    def is_built(self) -> bool:
        return self.alternatives.applied

    def ensure_built(self) -> RatchetDynamicContainer:
        """``build()`` unless already built."""
        if not self.is_built:
            self.build()
        return self

    def describe_spis(self) -> list[SpiDescription]:
        """Every SPI with its active implementation, priority and origin (builds if needed)."""
        self.ensure_built()
        return self.alternatives.describe()

    def __deepcopy__(self, memo: dict[Any, Any] | None = None) -> RatchetDynamicContainer:
        memo = {} if memo is None else memo
        copied: RatchetDynamicContainer = super().__deepcopy__(memo)
        registry: AlternativeRegistry | None = self.__dict__.get("_ratchet_alternatives")
        if registry is not None:
            copied.__dict__["_ratchet_alternatives"] = registry.copy_for(copied, memo)
        return copied


class RatchetContainer(containers.DeclarativeContainer):
    """Declarative Ratchet container. Instances are :class:`RatchetDynamicContainer`."""

    instance_type = RatchetDynamicContainer

    __self__ = providers.Self()

    overrides: providers.Object[dict[str, Any]] = providers.Object({})
    """Explicit configuration values by key name; the highest-precedence source."""

    config_sources = providers.List(
        providers.Singleton(lazy("ratchet_core.defaults.config.DictConfigSource"), overrides),
        providers.Singleton(lazy("ratchet_core.defaults.config.EnvironmentConfigSource")),
        providers.Singleton(lazy("ratchet_core.defaults.config.TomlFileConfigSource.discover")),
    )
    settings = providers.Singleton(
        lazy("ratchet_core.defaults.config.DefaultRatchetConfig.from_sources"),
        sources=config_sources,
    )

    # ---------------------------------------------------------- policies
    retry_policy = providers.Singleton(lazy("ratchet_core.defaults.retry.DefaultRetryPolicy"))
    circuit_breaker_config_provider = providers.Singleton(
        lazy("ratchet_core.defaults.resilience.DefaultCircuitBreakerConfigProvider"),
        settings=settings,
    )
    metrics_collector = providers.Singleton(
        lazy("ratchet_core.defaults.metrics.create_metrics_collector"),
        settings=settings,
    )
    resilience_strategy = providers.Singleton(
        lazy("ratchet_core.defaults.resilience.DefaultResilienceStrategy"),
        config_provider=circuit_breaker_config_provider,
        metrics=metrics_collector,
    )
    class_policy = providers.Singleton(
        lazy("ratchet_core.defaults.security.PackagePrefixClassPolicy.from_settings"),
        settings=settings,
    )
    error_sanitizer = providers.Singleton(
        lazy("ratchet_core.defaults.security.DefaultErrorSanitizer")
    )
    payload_masking_policy = providers.Singleton(
        lazy("ratchet_core.defaults.security.DefaultPayloadMaskingPolicy")
    )
    job_authorization_policy = providers.Singleton(
        lazy("ratchet_core.defaults.authorization.AllowAllJobAuthorizationPolicy")
    )
    payload_encryption = providers.Singleton(
        lazy("ratchet_core.defaults.payload.create_payload_encryption"), settings=settings
    )
    key_provider = providers.Singleton(
        lazy("ratchet_core.defaults.payload.SettingsKeyProvider"), settings=settings
    )
    payload_codec = providers.Singleton(
        lazy("ratchet_core.payload.codec.PayloadCodec.from_settings"),
        settings=settings,
        encryption=payload_encryption,
        key_provider=key_provider,
        metrics=metrics_collector,
    )

    # ---------------------------------------------------------- payloads
    payload_serializer = providers.Singleton(
        lazy("ratchet_core.defaults.payload.CattrsPayloadSerializer"),
        class_policy=class_policy,
    )
    result_persistence_strategy = providers.Singleton(
        lazy("ratchet_core.defaults.payload.DefaultResultPersistenceStrategy"),
        serializer=payload_serializer,
        settings=settings,  # limits.max_result_bytes
    )
    bean_resolver = providers.Singleton(
        lazy("ratchet_core.defaults.beans.ContainerBeanResolver"), container=__self__
    )
    job_invocation_resolver = providers.Singleton(
        lazy("ratchet_core.defaults.invocation.DefaultJobInvocationResolver"),
        serializer=payload_serializer,
        class_policy=class_policy,
        bean_resolver=bean_resolver,
    )
    target_loader = providers.Singleton(
        lazy("ratchet_core.defaults.targets.default_target_loader"),
        resolver=job_invocation_resolver,
        serializer=payload_serializer,
        class_policy=class_policy,
        bean_resolver=bean_resolver,
    )
    lambda_analyzer = providers.Singleton(
        lazy("ratchet_core.defaults.targets.DefaultLambdaAnalyzer"),
        resolver=job_invocation_resolver,
    )

    # ---------------------------------------------------------- execution
    execution_tuning_provider = providers.Singleton(
        lazy("ratchet_core.defaults.execution.DefaultExecutionTuningProvider"), settings=settings
    )
    polling_strategy_provider = providers.Singleton(
        lazy("ratchet_core.defaults.execution.DefaultPollingStrategyProvider")
    )
    executor_provider = providers.Singleton(
        lazy("ratchet_core.defaults.execution.DefaultExecutorProvider")
    )

    # ---------------------------------------------------------- store, cluster, logging
    job_store = providers.Singleton(
        lazy("ratchet_core.defaults.store.create_store"), settings=settings
    )
    # fills ParentResult/ParentError/SignalPayload parameters (docs/workflows.md)
    pre_execution_arg_resolver = providers.Singleton(
        lazy("ratchet_core.defaults.workflow.WorkflowArgResolver"),
        store=job_store,
        codec=payload_codec,
    )
    job_logger_factory = providers.Singleton(
        lazy("ratchet_core.defaults.logging.LoguruJobLoggerFactory"),
        store=job_store,
        settings=settings,  # limits.max_job_log_lines
    )
    node_identity_provider = providers.Singleton(
        lazy("ratchet_core.defaults.cluster.DefaultNodeIdentityProvider"), settings=settings
    )
    node_tag_affinity_provider = providers.Singleton(
        lazy("ratchet_core.defaults.cluster.DefaultNodeTagAffinityProvider"), settings=settings
    )
    cluster_coordinator = providers.Singleton(
        lazy("ratchet_core.defaults.coordination.create_cluster_coordinator"),
        settings=settings,
        node_identity=node_identity_provider,
        store=job_store,  # a SQLite store's file is watched for other processes' inserts
    )
    startup_coordinator = providers.Singleton(
        lazy("ratchet_core.defaults.coordination.StoreBackedStartupCoordinator"),
        store=job_store,
        node_identity=node_identity_provider,
    )
    after_commit_registrar = providers.Singleton(
        lazy("ratchet_core.defaults.transactions.DefaultAfterCommitRegistrar")
    )
    lifecycle_hooks = providers.List()

    # ---------------------------------------------------------- engine
    worker_parts = providers.Container(WorkerParts)
    """The template of every worker's parts: override one here (docs/worker.md)."""
    scheduler = providers.Singleton(
        lazy("ratchet_core.defaults.scheduler.SchedulerService"),
        store=job_store,
        settings=settings,
        resolver=job_invocation_resolver,
        loader=target_loader,
        serializer=payload_serializer,
        class_policy=class_policy,
        after_commit=after_commit_registrar,
        cluster=cluster_coordinator,
        node_identity=node_identity_provider,
        metrics=metrics_collector,
        codec=payload_codec,
        masking_policy=payload_masking_policy,
        authorization=job_authorization_policy,
    )
    invocation_submission_service = providers.Singleton(
        lazy("ratchet_core.defaults.submission.DefaultInvocationSubmissionService"),
        scheduler=scheduler,
    )
    worker = providers.Factory(
        lazy("ratchet_core.worker.Worker"),
        store=job_store,
        settings=settings,
        serializer=payload_serializer,
        resolver=job_invocation_resolver,
        loader=target_loader,
        class_policy=class_policy,
        retry_policy=retry_policy,
        error_sanitizer=error_sanitizer,
        metrics=metrics_collector,
        executor_provider=executor_provider,
        tuning=execution_tuning_provider,
        polling=polling_strategy_provider,
        logger_factory=job_logger_factory,
        bean_resolver=bean_resolver,
        node_identity=node_identity_provider,
        tag_affinity=node_tag_affinity_provider,
        cluster=cluster_coordinator,
        startup=startup_coordinator,
        lifecycle_hooks=lifecycle_hooks,
        result_persistence=result_persistence_strategy,
        arg_resolver=pre_execution_arg_resolver,
        resilience=resilience_strategy,
        breaker_config=circuit_breaker_config_provider,
        scheduler=scheduler,
        codec=payload_codec,
        authorization=job_authorization_policy,
        parts=worker_parts,
    )


def create_container(overrides: dict[str, Any] | None = None) -> RatchetDynamicContainer:
    """A new (unbuilt) Ratchet container; ``overrides`` are explicit configuration values."""
    container = RatchetContainer()
    if overrides:
        container.overrides.override(dict(overrides))
    return cast(RatchetDynamicContainer, container)


def find_ratchet_container(obj: Any) -> RatchetDynamicContainer:
    """The Ratchet container inside ``obj``: ``obj`` itself, or the container of a
    ``providers.Container`` provider that an application container holds (searched breadth
    first). ``LookupError`` if there is none."""
    queue: list[Any] = [obj]
    seen: set[int] = set()
    while queue:
        current = queue.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, RatchetDynamicContainer):
            return current
        if isinstance(current, providers.Container):
            queue.append(current.container)
        elif isinstance(current, containers.DynamicContainer):
            queue.extend(
                p for p in current.providers.values() if isinstance(p, providers.Container)
            )
    raise LookupError(
        f"{obj!r} holds no Ratchet container; nest one with "
        "`ratchet = providers.Container(RatchetContainer)`"
    )


__all__ = [
    "SPI_BINDINGS",
    "ImportTarget",
    "RatchetContainer",
    "RatchetDynamicContainer",
    "SpiBinding",
    "binding_for",
    "create_container",
    "find_ratchet_container",
    "lazy",
]
