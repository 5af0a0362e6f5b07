"""The defaults of the two SPIs that view job targets through the resolver: the container's
``TargetLoader`` (:func:`default_target_loader`) and the compatibility ``LambdaAnalyzer``
(:class:`DefaultLambdaAnalyzer`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ratchet_api.model import LambdaDescriptor
from ratchet_api.spi.payload import JobInvocationResolver, PayloadSerializer, TargetLoader
from ratchet_api.spi.policies import ClassPolicy
from ratchet_api.spi.runtime import BeanResolver
from ratchet_core.enqueue.invocation import DefaultJobInvocationResolver


def default_target_loader(
    resolver: JobInvocationResolver,
    serializer: PayloadSerializer,
    class_policy: ClassPolicy,
    bean_resolver: BeanResolver,
) -> TargetLoader:
    """The container's default ``TargetLoader``: the active ``JobInvocationResolver`` when it
    is also a ``TargetLoader`` (the default resolver, or one extending it), else a
    :class:`DefaultJobInvocationResolver` with the same collaborators (a resolver that
    implements only ``resolve`` changes what is accepted at enqueue, not how jobs run)."""
    if isinstance(resolver, TargetLoader):
        return resolver
    return DefaultJobInvocationResolver(
        serializer=serializer, class_policy=class_policy, bean_resolver=bean_resolver
    )


class DefaultLambdaAnalyzer:
    """The compatibility ``LambdaAnalyzer``: the resolver's view of a callable without
    arguments. Refuses the same targets as the resolver (``InvalidTargetError``)."""

    def __init__(self, resolver: JobInvocationResolver) -> None:
        self._resolver = resolver

    def analyze(self, target: Callable[..., Any]) -> LambdaDescriptor:
        if isinstance(self._resolver, DefaultJobInvocationResolver):
            info = self._resolver.describe(target)
            return LambdaDescriptor(
                target_module=info.module,
                qualname=info.qualname,
                signature=info.signature,
                is_static=info.static,
            )
        # another resolver: only its view of a call without arguments is available
        invocation = self._resolver.resolve(target)
        return LambdaDescriptor(
            target_module=invocation.module,
            qualname=invocation.qualname,
            signature=invocation.signature,
            is_static=invocation.static,
        )


__all__ = ["DefaultLambdaAnalyzer", "default_target_loader"]
