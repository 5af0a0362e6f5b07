"""Job authorization: the default policy (allow everything) and a ready-made tenant policy.

The scheduler calls ``check_create`` before a job is written and the worker calls
``check_execute`` before it runs one. With the default policy both calls are skipped
entirely (:func:`effective_policy` returns None), so authorization costs nothing unless an
application registers a ``JobAuthorizationPolicy`` alternative.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ratchet_api.errors import JobAuthorizationError
from ratchet_api.model import JobAuthorizationRequest, JobInvocation
from ratchet_api.spi.policies import JobAuthorizationPolicy
from ratchet_api.store.entities import JobEntity
from ratchet_api.store.protocols import JobExtensionStore


class AllowAllJobAuthorizationPolicy:
    """The default: every job may be created and executed."""

    def check_create(self, request: JobAuthorizationRequest) -> None:
        return None

    def check_execute(self, request: JobAuthorizationRequest) -> None:
        return None


def effective_policy(policy: JobAuthorizationPolicy | None) -> JobAuthorizationPolicy | None:
    """``policy``, or None when it is absent or the allow-all default (nothing to call)."""
    if policy is None or type(policy) is AllowAllJobAuthorizationPolicy:
        return None
    return policy


def authorization_request(
    job: JobEntity, invocation: JobInvocation, extension: JobExtensionStore | None
) -> JobAuthorizationRequest:
    """The dispatch-time request of a stored job (its properties read from the store)."""
    properties = extension.get_properties_by_prefix(job.id, "") if extension is not None else {}
    return JobAuthorizationRequest(
        job_id=job.id,
        invocation=invocation,
        tags=job.tags,
        properties=properties,
        priority=job.priority,
        execution_target=job.execution_target,
        job_type=job.job_type,
    )


class TenantJobAuthorizationPolicy:
    """Multi-tenant isolation by job property: every job must carry a ``tenant`` property (set
    with ``.property("tenant", "acme")``) naming a known tenant, and may only target functions
    under that tenant's module prefixes. Jobs tagged with one of ``blocked_tags`` are refused
    at dispatch (an operator's kill switch: tag jobs, deploy the policy, they stop running).

    ``tenants`` maps a tenant to its allowed module prefixes (``{"acme": ["acme.jobs"]}``; a
    prefix matches itself and its sub-modules)."""

    def __init__(
        self,
        tenants: Mapping[str, Iterable[str]],
        *,
        property_name: str = "tenant",
        blocked_tags: Iterable[str] = (),
    ) -> None:
        self.tenants = {t: tuple(p) for t, p in tenants.items()}
        self.property_name = property_name
        self.blocked_tags = frozenset(blocked_tags)

    def _check(self, request: JobAuthorizationRequest, stage: str) -> None:
        tenant = request.properties.get(self.property_name)
        if tenant is None:
            raise JobAuthorizationError(
                request.target, f"the job has no {self.property_name!r} property", stage=stage
            )
        prefixes = self.tenants.get(tenant)
        if prefixes is None:
            raise JobAuthorizationError(request.target, f"unknown tenant {tenant!r}", stage=stage)
        module = request.invocation.module
        if not any(module == p or module.startswith(p + ".") for p in prefixes):
            raise JobAuthorizationError(
                request.target,
                f"tenant {tenant!r} may only run jobs under {', '.join(prefixes) or 'nothing'}",
                stage=stage,
            )

    def check_create(self, request: JobAuthorizationRequest) -> None:
        self._check(request, "create")

    def check_execute(self, request: JobAuthorizationRequest) -> None:
        self._check(request, "execute")
        blocked = self.blocked_tags.intersection(request.tags)
        if blocked:
            raise JobAuthorizationError(
                request.target, f"tag {sorted(blocked)[0]!r} is blocked", stage="execute"
            )


__all__ = [
    "AllowAllJobAuthorizationPolicy",
    "TenantJobAuthorizationPolicy",
    "authorization_request",
    "effective_policy",
]
