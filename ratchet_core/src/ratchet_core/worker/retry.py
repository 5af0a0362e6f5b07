"""Retry decisions of the worker: the global ``RetryPolicy`` bound to one job's own values.

A job carries ``max_retries`` and an optional ``BackoffPolicy`` (stored as JSON, decoded with
``ratchet_core.payload.forms.decode_backoff``). After a failed attempt the worker calls
:func:`decide_retry`, which binds the active policy to the job with
``ratchet_core.defaults.retry.bind_retry_policy``:

* the default ``DefaultRetryPolicy`` offers ``bind(max_retries, backoff)``: it retries while
  ``attempt <= max_retries`` (a job runs at most ``max_retries + 1`` times) and waits the job's
  backoff (``DEFAULT_BACKOFF`` when the job has none), FIXED or EXPONENTIAL, with jitter drawn
  uniformly from ``[delay / 2, delay]`` when the backoff asks for it;
* an overriding policy without ``bind`` sees only ``(attempt, cause)``: its ``should_retry`` and
  ``get_delay`` decide alone.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import attrs

from ratchet_api.model import BackoffPolicy
from ratchet_api.spi.policies import RetryPolicy
from ratchet_core.defaults.retry import bind_retry_policy

DEFAULT_BACKOFF = BackoffPolicy()
"""Backoff of a job enqueued without one: 1 s, 2 s, 4 s ... capped at 10 minutes, jittered."""

_log = logging.getLogger("ratchet.retry")


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
    """Ask ``policy`` (bound to the job) whether attempt number ``attempt`` (1-based) is
    retried and after which delay. A policy that raises dead-letters the job (logged) rather
    than losing it; a negative delay is treated as zero."""
    try:
        bound = bind_retry_policy(policy, max_retries, backoff or DEFAULT_BACKOFF)
        if not bound.should_retry(attempt, cause):
            return RetryDecision(None)
        delay = bound.get_delay(attempt)
    except Exception:  # noqa: BLE001 - a broken policy dead-letters instead of losing the job
        _log.exception("retry policy %r failed; the job goes to the dead letter", policy)
        return RetryDecision(None)
    return RetryDecision(max(delay, timedelta(0)))


__all__ = ["DEFAULT_BACKOFF", "RetryDecision", "decide_retry"]
