"""OpenTelemetry for Ratchet (extra ``ratchet-core[otel]``): metrics through the OTel API as a
``MetricsCollector`` and the spans of :mod:`ratchet_core.observability.tracing`.

``metrics.backend = otel`` selects :class:`OpenTelemetryMetricsCollector`: the same metric
names and tags as the statsd collector (docs/metrics.md), recorded as OTel counters and
histograms (milliseconds) on the global ``MeterProvider`` under the meter ``ratchet``; the
application configures the SDK and its exporters as usual.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ratchet_core.observability.metrics import StatsdMetricsCollector

_log = logging.getLogger("ratchet.metrics")


class OpenTelemetryMetricsCollector(StatsdMetricsCollector):
    """``MetricsCollector`` over the OpenTelemetry metrics API. Thread safe, never raises.

    Reuses the statsd collector's mapping of callbacks to names and tags; only the recording
    differs (a counter per counted name, a histogram in ms per timed name)."""

    def __init__(self, meter_provider: Any = None) -> None:
        from opentelemetry import metrics

        provider = meter_provider or metrics.get_meter_provider()
        self._meter = provider.get_meter("ratchet")
        self._counters: dict[str, Any] = {}
        self._histograms: dict[str, Any] = {}
        self._instruments_lock = threading.Lock()

    def _instrument(self, name: str, kind: str) -> Any:
        table = self._counters if kind == "counter" else self._histograms
        found = table.get(name)
        if found is None:
            with self._instruments_lock:
                found = table.get(name)
                if found is None:
                    if kind == "counter":
                        found = self._meter.create_counter(name)
                    else:
                        found = self._meter.create_histogram(name, unit="ms")
                    table[name] = found
        return found

    def _incr(self, name: str, count: int = 1, **tags: object) -> None:
        try:
            self._instrument(name, "counter").add(count, {k: str(v) for k, v in tags.items()})
        except Exception:  # noqa: BLE001 - metrics never fail the caller
            _log.debug("recording %s failed", name, exc_info=True)

    def _timing(self, name: str, millis: int, **tags: object) -> None:
        try:
            self._instrument(name, "histogram").record(
                max(0, millis), {k: str(v) for k, v in tags.items()}
            )
        except Exception:  # noqa: BLE001 - metrics never fail the caller
            _log.debug("recording %s failed", name, exc_info=True)

    def close(self) -> None:
        """Nothing to close (the application owns the MeterProvider)."""


__all__ = ["OpenTelemetryMetricsCollector"]
