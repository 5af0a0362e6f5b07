"""The container-backed ``BeanResolver``: instances for non-static job targets.

A class is resolved by finding a provider, in the application container and the Ratchet
container, whose produced class is that class or a subclass (an exact match wins; two subclass
matches without an exact one are ambiguous). Declare the classes of your job methods in your
application container::

    class ApplicationContainer(containers.DeclarativeContainer):
        ratchet = providers.Container(RatchetContainer)
        billing = providers.Factory(BillingService, store=ratchet.job_store)

``acquire`` returns a handle; closing it calls ``close()`` on factory-scoped (dependent)
instances and leaves singletons alone.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any, TypeVar

from dependency_injector import containers, providers

from ratchet_core.runtime.alternatives import provided_target

T = TypeVar("T")


class ManagedInstance:
    """An invocation-scoped handle (``ManagedBean``)."""

    def __init__(self, instance: Any, dependent: bool) -> None:
        self._instance = instance
        self.dependent = dependent
        self._closed = False

    @property
    def instance(self) -> Any:
        return self._instance

    def close(self) -> None:
        """Release a dependent instance (calls its ``close()`` if present). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.dependent:
            closer = getattr(self._instance, "close", None)
            if callable(closer):
                closer()

    def __enter__(self) -> ManagedInstance:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _effective(provider: Any) -> Any:
    seen = 0
    while getattr(provider, "last_overriding", None) is not None and seen < 32:
        provider = provider.last_overriding
        seen += 1
    return provider


class ContainerBeanResolver:
    """Resolves classes through the providers of the container and its parents. Thread safe."""

    _SKIPPED = (providers.Container, providers.Configuration, providers.Self, providers.List)

    def __init__(self, container: Any) -> None:
        self._container = container
        self._cache: dict[type[Any], Any] = {}
        self._lock = threading.Lock()

    def _containers(self) -> list[Any]:
        chain: list[Any] = []
        current: Any = self._container
        while current is not None and len(chain) < 16:
            if isinstance(current, containers.DynamicContainer):
                chain.append(current)
            current = getattr(current, "parent", None)
        return list(reversed(chain))  # application container first

    def _find(self, cls: type[Any]) -> Any:
        with self._lock:
            if cls in self._cache:
                return self._cache[cls]
        exact: list[tuple[str, Any]] = []
        sub: list[tuple[str, Any]] = []
        for container in self._containers():
            for name, provider in container.providers.items():
                if isinstance(provider, self._SKIPPED):
                    continue
                target = provided_target(_effective(provider))
                if not isinstance(target, type):
                    continue
                if target is cls:
                    exact.append((name, provider))
                elif issubclass(target, cls):
                    sub.append((name, provider))
        if exact:
            found = exact[0][1]
        elif len(sub) == 1:
            found = sub[0][1]
        elif sub:
            names = ", ".join(n for n, _ in sub)
            raise LookupError(
                f"several providers produce subclasses of {cls.__module__}.{cls.__qualname__} "
                f"({names}); add a provider of the class itself"
            )
        else:
            raise LookupError(
                f"no provider in the container produces {cls.__module__}.{cls.__qualname__}; "
                f"add one to your application container, e.g. "
                f"`{cls.__name__.lower()} = providers.Factory({cls.__name__})`"
            )
        with self._lock:
            self._cache[cls] = found
        return found

    def resolve(self, cls: type[T]) -> T:
        instance: T = self._find(cls)()
        return instance

    def validate_resolvable(self, cls: type[Any]) -> None:
        self._find(cls)

    def acquire(self, cls: type[Any]) -> ManagedInstance:
        provider = self._find(cls)
        dependent = not isinstance(
            _effective(provider), (providers.BaseSingleton, providers.Object)
        )
        return ManagedInstance(provider(), dependent)


__all__ = ["ContainerBeanResolver", "ManagedInstance"]
