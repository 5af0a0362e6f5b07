"""``create_metrics_collector``: the ``MetricsCollector`` that ``metrics.backend`` selects (the
container's ``metrics_collector``).

A module of its own because it knows every backend: the statsd collector
(:mod:`ratchet_core.observability.metrics`), the OpenTelemetry one (:mod:`ratchet_core.contrib.otel`, which
extends the statsd one) and the no-op default; kept in ``metrics`` it closed an import circle
with ``contrib.otel`` (tests/core/test_import_cycles.py).
"""

from __future__ import annotations

from ratchet_api.errors import ConfigurationError
from ratchet_api.spi.runtime import MetricsCollector, RatchetConfig
from ratchet_core.observability.metrics import (
    METRICS_BACKEND,
    STATSD_HOST,
    STATSD_PORT,
    STATSD_PREFIX,
    StatsdMetricsCollector,
)


def create_metrics_collector(settings: RatchetConfig) -> MetricsCollector:
    """The collector selected by ``metrics.backend`` (the container's ``metrics_collector``)."""
    backend = settings.get(METRICS_BACKEND)
    if backend == "statsd":
        return StatsdMetricsCollector(
            host=settings.get(STATSD_HOST),
            port=settings.get(STATSD_PORT),
            prefix=settings.get(STATSD_PREFIX) or None,
        )
    if backend == "otel":
        try:
            from ratchet_core.contrib.otel import OpenTelemetryMetricsCollector

            return OpenTelemetryMetricsCollector()
        except ImportError as exc:
            raise ConfigurationError(
                "metrics.backend",
                f"otel needs the OpenTelemetry API: pip install 'ratchet-core[otel]' ({exc})",
            ) from exc
    from ratchet_core.defaults.metrics import NoOpMetricsCollector

    collector: MetricsCollector = NoOpMetricsCollector()
    return collector


__all__ = ["create_metrics_collector"]
