"""The poller's circuit breaker: claims stop hammering a failing store.

Every claim runs through one :class:`~ratchet_core.defaults.resilience.CircuitBreaker` configured by the
``CircuitBreakerConfigProvider``'s POLLER profile (``circuit_breaker.poller.*``). A failed claim
counts against it; while it is OPEN the poller does not claim and waits until trial claims are
allowed (``circuit_breaker.poller.wait_duration``). Its state changes are reported to
``MetricsCollector.poller_breaker_state`` and logged. With breakers disabled
(``circuit_breaker.enabled = false``) claims run directly and a failed claim is retried after the
polling strategy's delay.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from ratchet_api.errors import CircuitBreakerOpenError
from ratchet_api.model import CircuitBreakerExceptionFilter, CircuitBreakerProfile
from ratchet_api.spi import CircuitBreakerConfigProvider, MetricsCollector
from ratchet_core.defaults.resilience import CircuitBreaker, CircuitState

_log = logging.getLogger("ratchet.worker")

T = TypeVar("T")

_EVERY_ERROR = CircuitBreakerExceptionFilter()
"""Every exception of a claim counts as a failure."""


class PollerGuard:
    """Runs claims under the poller breaker of one worker. Thread safe."""

    def __init__(
        self,
        name: str,
        config_provider: CircuitBreakerConfigProvider | None,
        metrics: MetricsCollector,
    ) -> None:
        self._name = name
        self._metrics = metrics
        self.breaker: CircuitBreaker | None = None
        if config_provider is not None and config_provider.is_enabled():
            self.breaker = CircuitBreaker(
                f"poller:{name}",
                config_provider.config_for(CircuitBreakerProfile.POLLER),
                on_state_change=self._changed,
            )

    def open_for(self) -> float:
        """Seconds the poller must not claim (0 when a claim may run now)."""
        if self.breaker is None or self.breaker.is_call_permitted():
            return 0.0
        return max(0.01, self.breaker.remaining_open_time().total_seconds())

    def claim(self, claim: Callable[[], T]) -> T:
        """Run ``claim`` under the breaker. Raises ``CircuitBreakerOpenError`` when it is
        open, else what ``claim`` raises."""
        if self.breaker is None:
            return claim()
        return self.breaker.call(claim, _EVERY_ERROR)

    def _changed(self, _breaker: str, old: CircuitState, new: CircuitState) -> None:
        level = logging.WARNING if new is CircuitState.OPEN else logging.INFO
        _log.log(level, "poller breaker of %s: %s -> %s", self._name, old.value, new.value)
        self._metrics.poller_breaker_state(self._name, new.value)


__all__ = ["CircuitBreakerOpenError", "PollerGuard"]
