"""The default ``RetryPolicy``: a passthrough to the job's own ``max_retries`` and backoff.

The container holds one ``DefaultRetryPolicy`` (with library defaults: 3 retries, exponential
backoff). For each failed attempt the engine binds the job's own values with
:func:`bind_retry_policy`, which calls ``policy.bind(max_retries, backoff)`` when the active
policy offers it and otherwise uses the policy as is: an overriding policy sees only the attempt
and the cause, as the SPI states.
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Protocol, runtime_checkable

from ratchet_api.model import BackoffPolicy
from ratchet_api.spi import RetryPolicy

DEFAULT_MAX_RETRIES = 3


class DefaultRetryPolicy:
    """Retries while ``attempt <= max_retries`` (attempt numbers start at 1, so a job runs at
    most ``max_retries + 1`` times) and waits ``backoff``'s delay, with jitter drawn uniformly
    from ``[delay / 2, delay]`` when the backoff asks for it. Thread safe."""

    def __init__(
        self,
        max_retries: int = DEFAULT_MAX_RETRIES,
        backoff: BackoffPolicy | None = None,
        *,
        rng: random.Random | None = None,
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must not be negative, got {max_retries}")
        self.max_retries = max_retries
        self.backoff = backoff if backoff is not None else BackoffPolicy()
        self._rng = rng or random.Random()

    def bind(self, max_retries: int, backoff: BackoffPolicy) -> DefaultRetryPolicy:
        """This policy for one job: its own ``max_retries`` and ``backoff``."""
        return DefaultRetryPolicy(max_retries, backoff, rng=self._rng)

    def should_retry(self, attempt: int, cause: BaseException) -> bool:
        return attempt <= self.max_retries

    def get_delay(self, attempt: int) -> timedelta:
        delay = self.backoff.base_delay(max(attempt, 1))
        if not self.backoff.jitter or delay <= timedelta(0):
            return delay
        seconds = delay.total_seconds()
        return timedelta(seconds=self._rng.uniform(seconds / 2, seconds))


@runtime_checkable
class BindableRetryPolicy(Protocol):
    """A ``RetryPolicy`` that can take a job's own retry settings."""

    def bind(self, max_retries: int, backoff: BackoffPolicy) -> RetryPolicy: ...


def bind_retry_policy(policy: RetryPolicy, max_retries: int, backoff: BackoffPolicy) -> RetryPolicy:
    """The policy to consult for one job: ``policy.bind(...)`` if it supports binding, else
    ``policy`` itself."""
    if isinstance(policy, BindableRetryPolicy):
        return policy.bind(max_retries, backoff)
    return policy


__all__ = ["BindableRetryPolicy", "DefaultRetryPolicy", "bind_retry_policy"]
