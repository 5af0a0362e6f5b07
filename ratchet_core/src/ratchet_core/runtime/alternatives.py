"""Alternatives: priority-ordered replacements of SPI implementations.

An alternative is ``(spi, provider, priority, origin)``. They come from three places:

* explicit registration: ``container.alternatives.register(RetryPolicy, provider, priority=...)``;
* ``@alternative(RetryPolicy, priority=...)`` on classes of the modules listed by the
  ``alternatives.modules`` configuration key (imported at build);
* entry points of installed distributions, group ``ratchet.alternatives``: the object is an
  ``@alternative`` class or a function ``register(container) -> None``.

At build, per SPI, the highest priority wins (any alternative beats the default); the providers
are overridden in ascending priority with dependency-injector's ``override``, so every consumer
of the SPI's provider receives the winner. Two alternatives sharing the highest priority raise
``AmbiguousAlternativeError``; an alternative missing a *required* member of its protocol
raises ``NonConformingAlternativeError`` naming it. Members marked ``@optional_member`` in the
protocol may be left out: the instance the container hands out is then completed with the
protocol's defaults (:func:`complete`), and the Java original's signatures that Python
expresses differently (a two-argument ``ResilienceStrategy.execute``, a name-only
``PayloadMaskingPolicy.is_sensitive_field``) are adapted to the form the engine calls.
``SchedulerLifecycleHook`` is multi-valued: every registered hook is active, in ascending
priority order.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import inspect
import threading
import typing
from collections.abc import Callable, Iterator
from typing import Any, Literal, Protocol, TypeVar

import attrs
from dependency_injector import providers

from ratchet_api.errors import (
    AmbiguousAlternativeError,
    DeploymentError,
    NonConformingAlternativeError,
)
from ratchet_api.priority import Priority
from ratchet_core.runtime.bindings import SPI_BINDINGS, ImportTarget, binding_for
from ratchet_core.runtime.conformance import (
    CompletedAlternative,
    adapts_signatures,
    complete,
    completes,
    missing_members,
    missing_optional_members,
    protocol_members,
    required_members,
)


class ContainerHost(Protocol):
    """What the registry needs of the container it belongs to (the container's class,
    ``ratchet_core.runtime.container.RatchetDynamicContainer``, is not imported here: the container
    builds the registry, so the registry depends only on this)."""

    @property
    def providers(self) -> Any:
        """The container's providers by name (dependency-injector's mapping)."""

    def settings(self) -> Any:
        """The ``RatchetConfig`` of the container."""


ENTRY_POINT_GROUP = "ratchet.alternatives"
DEFAULT_ORIGIN = "default"
EXPLICIT_ORIGIN = "explicit"

C = TypeVar("C", bound=type[Any])
Scope = Literal["singleton", "factory"]


@attrs.frozen
class AlternativeSpec:
    """What ``@alternative`` records on a class."""

    spi: type[Any]
    priority: int
    scope: Scope


def alternative(
    spi: type[Any], *, priority: int = Priority.APPLICATION, scope: Scope = "singleton"
) -> Callable[[C], C]:
    """Mark a class as an alternative for ``spi``. It takes effect when its module is listed in
    ``alternatives.modules`` (or the class is an entry point of group ``ratchet.alternatives``).

    Constructor parameters named like a container provider (``settings``, ``job_store``,
    ``metrics_collector``, ...) are injected from the container. ``scope`` is ``"singleton"``
    (one instance per container) or ``"factory"`` (a new instance per injection).
    """
    if scope not in ("singleton", "factory"):
        raise ValueError(f"scope must be 'singleton' or 'factory', got {scope!r}")

    def decorate(cls: C) -> C:
        if not isinstance(cls, type):
            raise TypeError(f"@alternative decorates classes, not {cls!r}")
        specs = list(cls.__dict__.get("__ratchet_alternatives__", ()))
        specs.append(AlternativeSpec(spi, int(priority), scope))
        setattr(cls, "__ratchet_alternatives__", tuple(specs))  # noqa: B010
        return cls

    return decorate


def alternative_specs(cls: type[Any]) -> tuple[AlternativeSpec, ...]:
    """The ``@alternative`` marks declared on ``cls`` itself (not inherited)."""
    specs: tuple[AlternativeSpec, ...] = cls.__dict__.get("__ratchet_alternatives__", ())
    return specs


@attrs.frozen(eq=False)
class Alternative:
    """One registered alternative."""

    spi: type[Any]
    provider: providers.Provider[Any]
    priority: int
    origin: str
    name: str


@attrs.frozen
class SpiDescription:
    """A row of ``describe_spis()`` / ``ratchet spi``."""

    spi: str
    provider: str
    implementation: str
    priority: int
    origin: str
    scope: str


def _describe_target(target: Any) -> str:
    if isinstance(target, type) or inspect.isfunction(target) or inspect.ismethod(target):
        return f"{target.__module__}.{target.__qualname__}"
    return f"{type(target).__module__}.{type(target).__qualname__} instance"


def provided_target(provider: Any) -> Any:
    """What a provider produces, as far as it is known without calling it: a class (for
    Factory/Singleton of a class, or a callable with a class return annotation), the object of
    an ``Object`` provider, or None when unknown."""

    if isinstance(provider, providers.Object):
        return provider.provides
    provides = getattr(provider, "provides", None)
    if provides is None:
        return None
    if isinstance(provides, ImportTarget):
        try:
            provides = provides.resolve()
        except ImportError:
            return None
    if isinstance(provides, type):
        return provides
    owner = getattr(provides, "__self__", None)
    if inspect.ismethod(provides) and isinstance(owner, type):
        # An alternative constructor such as ``Cls.from_settings`` produces ``Cls``.
        hints = _return_hint(provides)
        return hints if hints is not None else owner
    hint = _return_hint(provides)
    return hint


def _return_hint(func: Any) -> type[Any] | None:
    try:
        hint = typing.get_type_hints(func).get("return")
    except Exception:  # noqa: BLE001 - unresolvable annotations: unknown
        return None
    return hint if isinstance(hint, type) else None


def implementation_name(provider: Any) -> str:
    """A readable dotted name of what ``provider`` produces."""

    if isinstance(provider, providers.List):
        return ", ".join(implementation_name(p) for p in provider.args) or "(none)"
    if isinstance(provider, providers.Object):
        return _describe_target(provider.provides)
    provides = getattr(provider, "provides", None)
    if isinstance(provides, ImportTarget):
        return provides.path
    if provides is not None:
        return _describe_target(provides)
    return type(provider).__name__


def _scope_name(provider: Any) -> str:
    if isinstance(provider, providers.BaseSingleton):
        return "singleton"
    if isinstance(provider, providers.Factory):
        return "factory"
    if isinstance(provider, providers.Object):
        return "object"
    if isinstance(provider, providers.List):
        return "list"
    return type(provider).__name__.lower()


def _checked(
    provider: providers.Provider[Any],
    spi: type[Any],
    name: str,
) -> Any:
    instance = provider()
    missing = missing_members(spi, instance)
    if missing:
        raise NonConformingAlternativeError(spi.__name__, name, missing)
    return complete(spi, instance) if completes(spi) else instance


def _as_applied(alt: Alternative) -> providers.Provider[Any]:
    """The provider that overrides the SPI's: the alternative's own when what it produces is a
    known class the engine can call as is; else one that checks (when the product is only known
    when called) and completes (:func:`complete`) each instance it provides."""
    target = provided_target(alt.provider)
    if target is None or (
        completes(alt.spi)
        and (adapts_signatures(alt.spi) or missing_optional_members(alt.spi, target))
    ):
        return providers.Callable(_checked, alt.provider.provider, alt.spi, alt.name)
    return alt.provider


# ---------------------------------------------------------------- the registry


class AlternativeRegistry:
    """The alternatives of one container. Registration is thread safe; ``apply`` is meant to run
    once at startup (it may be re-run: earlier overrides are undone first)."""

    def __init__(self, container: ContainerHost) -> None:
        self._container = container
        self._explicit: list[Alternative] = []
        self._discovered: list[Alternative] = []
        self._applied: list[providers.Provider[Any]] = []
        self._hook_args_before: tuple[Any, ...] | None = None
        self._winners: dict[str, Alternative] = {}
        self._hooks: list[Alternative] = []
        self._origin_override: str | None = None
        self._lock = threading.RLock()
        self.applied = False

    def copy_for(self, container: ContainerHost, memo: dict[int, Any]) -> AlternativeRegistry:
        """A registry for a deep copy of the container, with the explicit registrations copied
        (their providers deep-copied with the same memo so references stay consistent)."""
        copied = AlternativeRegistry(container)
        copied._explicit = [
            attrs.evolve(a, provider=providers.deepcopy(a.provider, memo)) for a in self._explicit
        ]
        return copied

    # ------------------------------------------------------------ registration

    def register(
        self,
        spi: type[Any],
        provider: Any,
        *,
        priority: int = Priority.APPLICATION,
        name: str | None = None,
        origin: str | None = None,
    ) -> Alternative:
        """Register ``provider`` as an alternative for ``spi``.

        ``provider`` is a dependency-injector provider, or a class (wrapped in a ``Singleton``
        whose constructor parameters named like container providers are injected). Classes are
        checked against the protocol now; other providers at build (or at first provision
        when what they produce is only known then). Returns the registration.
        """

        binding = binding_for(spi)
        if isinstance(provider, type):
            provider = self._provider_for_class(provider, "singleton", binding.provider_name)
        if not isinstance(provider, providers.Provider):
            raise TypeError(
                f"alternative for {spi.__name__} must be a provider or a class, got {provider!r}"
            )
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise TypeError(f"priority must be an int, got {priority!r}")
        alt = Alternative(
            spi=spi,
            provider=provider,
            priority=priority,
            origin=origin or self._origin_override or EXPLICIT_ORIGIN,
            name=name or implementation_name(provider),
        )
        self._check(alt)
        with self._lock:
            if self._origin_override is not None:
                self._discovered.append(alt)
            else:
                self._explicit.append(alt)
        return alt

    def register_class(self, cls: type[Any], origin: str) -> list[Alternative]:
        """Register every ``@alternative`` mark of ``cls``."""

        specs = alternative_specs(cls)
        if not specs:
            raise DeploymentError(
                f"{_describe_target(cls)} ({origin}) is not marked with @alternative"
            )
        registered = []
        for spec in specs:
            binding = binding_for(spec.spi)
            provider = self._provider_for_class(cls, spec.scope, binding.provider_name)
            alt = Alternative(
                spi=spec.spi,
                provider=provider,
                priority=spec.priority,
                origin=origin,
                name=_describe_target(cls),
            )
            self._check(alt)
            with self._lock:
                self._discovered.append(alt)
            registered.append(alt)
        return registered

    def __iter__(self) -> Iterator[Alternative]:
        with self._lock:
            return iter([*self._explicit, *self._discovered])

    def _provider_for_class(
        self, cls: type[Any], scope: Scope, own_provider: str
    ) -> providers.Provider[Any]:
        kwargs: dict[str, Any] = {}
        try:
            parameters = inspect.signature(cls).parameters
        except (TypeError, ValueError):
            parameters = {}  # type: ignore[assignment]
        available = self._container.providers
        for pname in parameters:
            if pname != own_provider and pname in available:
                kwargs[pname] = available[pname]
        if scope == "factory":
            return providers.Factory(cls, **kwargs)
        return providers.Singleton(cls, **kwargs)

    @staticmethod
    def _check(alt: Alternative) -> None:
        target = provided_target(alt.provider)
        if target is None:
            return
        missing = missing_members(alt.spi, target)
        if missing:
            raise NonConformingAlternativeError(alt.spi.__name__, alt.name, missing)

    @contextlib.contextmanager
    def _origin(self, origin: str) -> Iterator[None]:
        previous = self._origin_override
        self._origin_override = origin
        try:
            yield
        finally:
            self._origin_override = previous

    # ------------------------------------------------------------ discovery

    def _discover(self) -> None:
        from ratchet_core.runtime.config import ALTERNATIVES_ENTRY_POINTS, ALTERNATIVES_MODULES

        self._discovered = []
        settings = self._container.settings()
        for module_name in settings.get(ALTERNATIVES_MODULES):
            self._scan_module(module_name)
        if settings.get(ALTERNATIVES_ENTRY_POINTS):
            for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
                self._load_entry_point(entry_point)

    def _scan_module(self, module_name: str) -> None:
        origin = f"decorator module {module_name}"
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise DeploymentError(
                f"alternatives.modules lists {module_name!r}, which cannot be imported: {exc}"
            ) from exc
        for value in list(vars(module).values()):
            if (
                isinstance(value, type)
                and value.__module__ == module.__name__
                and alternative_specs(value)
            ):
                self.register_class(value, origin)

    def _load_entry_point(self, entry_point: importlib.metadata.EntryPoint) -> None:
        dist = entry_point.dist.name if entry_point.dist is not None else "unknown distribution"
        origin = f"entry point {dist}"
        try:
            obj = entry_point.load()
        except Exception as exc:
            raise DeploymentError(
                f"entry point {entry_point.name} = {entry_point.value} of {dist} "
                f"(group {ENTRY_POINT_GROUP}) cannot be loaded: {exc}"
            ) from exc
        if isinstance(obj, type):
            self.register_class(obj, origin)
        elif callable(obj):
            with self._origin(origin):
                obj(self._container)
        else:
            raise DeploymentError(
                f"entry point {entry_point.name} of {dist} must name an @alternative class "
                f"or a function register(container), got {obj!r}"
            )

    # ------------------------------------------------------------ build

    def _hooks_provider(self) -> providers.List:
        hooks = self._container.providers["lifecycle_hooks"]
        assert isinstance(hooks, providers.List)
        return hooks

    def _undo(self) -> None:
        for provider in reversed(self._applied):
            provider.reset_last_overriding()
        self._applied = []
        if self._hook_args_before is not None:
            self._hooks_provider().set_args(*self._hook_args_before)
            self._hook_args_before = None
        self._winners = {}
        self._hooks = []

    def apply(self) -> None:
        """Discover, check, choose and apply. See the module docstring."""

        with self._lock:
            self._undo()
            self.applied = False
            self._discover()
            by_spi: dict[type[Any], list[Alternative]] = {}
            for alt in [*self._explicit, *self._discovered]:
                by_spi.setdefault(alt.spi, []).append(alt)
            plan: list[tuple[providers.Provider[Any], Alternative]] = []
            for binding in SPI_BINDINGS:
                alts = sorted(by_spi.get(binding.spi, []), key=lambda a: a.priority)
                if not alts:
                    continue
                target = self._container.providers[binding.provider_name]
                if binding.multi:
                    self._hooks = alts
                    continue
                top = alts[-1].priority
                tied = [a for a in alts if a.priority == top]
                if len(tied) > 1:
                    raise AmbiguousAlternativeError(
                        binding.spi_name, top, [f"{a.name} ({a.origin})" for a in tied]
                    )
                self._winners[binding.provider_name] = alts[-1]
                plan.extend((target, a) for a in alts)
            for target, alt in plan:
                target.override(_as_applied(alt))
                self._applied.append(target)
            if self._hooks:
                hooks_provider = self._hooks_provider()
                self._hook_args_before = tuple(hooks_provider.args)
                hook_providers = [_as_applied(a) for a in self._hooks]
                hooks_provider.set_args(*self._hook_args_before, *hook_providers)
            self.applied = True

    # ------------------------------------------------------------ description

    def describe(self) -> list[SpiDescription]:

        rows: list[SpiDescription] = []
        for binding in SPI_BINDINGS:
            provider = self._container.providers[binding.provider_name]
            winner = self._winners.get(binding.provider_name)
            active: list[Alternative] = (
                list(self._hooks) if binding.multi else [winner] if winner else []
            )
            if not active:
                scope = "list" if binding.multi else _scope_name(provider)
                rows.append(
                    SpiDescription(
                        binding.spi_name,
                        binding.provider_name,
                        implementation_name(provider),
                        Priority.LIBRARY_BEFORE,
                        DEFAULT_ORIGIN,
                        scope,
                    )
                )
            rows.extend(
                SpiDescription(
                    binding.spi_name,
                    binding.provider_name,
                    alt.name,
                    alt.priority,
                    alt.origin,
                    _scope_name(alt.provider),
                )
                for alt in active
            )
        return rows


__all__ = [
    "ENTRY_POINT_GROUP",
    "Alternative",
    "AlternativeRegistry",
    "AlternativeSpec",
    "CompletedAlternative",
    "SpiDescription",
    "alternative",
    "alternative_specs",
    "complete",
    "completes",
    "missing_members",
    "missing_optional_members",
    "protocol_members",
    "provided_target",
    "required_members",
]
