"""Retry decisions of the worker: the global ``RetryPolicy`` bound to one job's own values.

A job carries ``max_retries`` and an optional ``BackoffPolicy``. After a failed attempt the worker
asks :func:`decide_retry`:

* the default policy (``DefaultRetryPolicy``) defers to the job: retry while
  ``attempt <= max_retries`` and wait the job's backoff (or :data:`DEFAULT_BACKOFF`);
* an overriding policy sees only ``(attempt, cause)``: its ``should_retry`` and ``get_delay``
  decide alone.

A policy opts into the job's values by offering ``bind(max_retries, backoff) -> RetryPolicy``
(``DefaultRetryPolicy`` does); the bound policy is then asked as usual.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import attrs

from ratchet_api.model import BackoffPolicy
from ratchet_api.spi.policies import RetryPolicy

DEFAULT_BACKOFF = BackoffPolicy.exponential(1.0, multiplier=2.0, maximum=600.0, jitter=True)
"""Backoff of a job enqueued without one: 1 s, 2 s, 4 s ... capped at 10 minutes, jittered."""

_random = random.Random()
_log = logging.getLogger("ratchet.retry")


def backoff_delay(
    policy: BackoffPolicy, attempt: int, uniform: Callable[[float, float], float] | None = None
) -> timedelta:
    """Delay before retry number ``attempt`` (1-based) under ``policy``.

    FIXED waits ``initial``; EXPONENTIAL waits ``initial * multiplier ** (attempt - 1)`` capped
    at ``maximum``. With ``jitter`` the delay is drawn uniformly from ``[delay/2, delay]`` (equal
    jitter: it spreads a thundering herd of retries while keeping at least half the wait).
    ``uniform`` replaces the random source (tests)."""
    base = policy.base_delay(attempt)
    if not policy.jitter or base <= timedelta(0):
        return base
    draw = uniform or _random.uniform
    seconds = base.total_seconds()
    return timedelta(seconds=draw(seconds / 2, seconds))


@attrs.frozen
class JobBoundRetryPolicy:
    """``RetryPolicy`` answering for one job from its own ``max_retries`` and backoff: retry
    while ``attempt <= max_retries``; every failure counts (the cause does not matter)."""

    max_retries: int
    backoff: BackoffPolicy = DEFAULT_BACKOFF

    def should_retry(self, attempt: int, cause: BaseException) -> bool:
        return attempt <= self.max_retries

    def get_delay(self, attempt: int) -> timedelta:
        return backoff_delay(self.backoff, attempt)


def bind_retry_policy(
    policy: RetryPolicy, max_retries: int, backoff: BackoffPolicy | None
) -> RetryPolicy:
    """``policy`` bound to a job's values when it offers ``bind`` (see module docstring);
    otherwise ``policy`` itself."""
    bind: Any = getattr(policy, "bind", None)
    if callable(bind):
        bound: RetryPolicy = bind(max_retries, backoff or DEFAULT_BACKOFF)
        return bound
    return policy


@attrs.frozen
class RetryDecision:
    """What to do after a failed attempt: retry after ``delay``, or dead-letter (``delay`` None)."""

    delay: timedelta | None

    @property
    def retry(self) -> bool:
        return self.delay is not None


def decide_retry(
    policy: RetryPolicy,
    *,
    attempt: int,
    max_retries: int,
    backoff: BackoffPolicy | None,
    cause: BaseException,
) -> RetryDecision:
    """Ask ``policy`` (bound to the job) whether attempt ``attempt`` (1-based) is retried and
    after which delay. A policy that raises, or returns a negative delay, is treated as
    "dead letter" / zero delay respectively, so a broken policy cannot lose a job."""
    try:
        bound = bind_retry_policy(policy, max_retries, backoff)
        if not bound.should_retry(attempt, cause):
            return RetryDecision(None)
        delay = bound.get_delay(attempt)
    except Exception:  # noqa: BLE001 - a broken policy dead-letters instead of losing the job
        _log.exception("retry policy %r failed; the job goes to the dead letter", policy)
        return RetryDecision(None)
    return RetryDecision(max(delay, timedelta(0)))


__all__ = [
    "DEFAULT_BACKOFF",
    "JobBoundRetryPolicy",
    "RetryDecision",
    "backoff_delay",
    "bind_retry_policy",
    "decide_retry",
]
