"""The ``MetricsCollector`` defaults: :func:`create_metrics_collector` (the container's
``metrics_collector``, the backend that ``metrics.backend`` selects: the statsd collector of
:mod:`ratchet_core.observability.metrics`, the OpenTelemetry one of :mod:`ratchet_core.contrib.otel`, the Prometheus one of
:mod:`ratchet_core.observability.prometheus`)
and :class:`NoOpMetricsCollector`, used when metrics are disabled."""

from __future__ import annotations

from uuid import UUID

from ratchet_api.errors import ConfigurationError
from ratchet_api.model import JobType
from ratchet_api.spi import SignalOutcome
from ratchet_api.spi.runtime import MetricsCollector, RatchetConfig
from ratchet_core.observability.metrics import (
    METRICS_BACKEND,
    PROMETHEUS_ADDR,
    PROMETHEUS_PORT,
    STATSD_HOST,
    STATSD_PORT,
    STATSD_PREFIX,
    StatsdMetricsCollector,
)


class NoOpMetricsCollector:
    """Implements every ``MetricsCollector`` callback and does nothing."""

    def job_started(self, job_id: UUID, job_type: JobType, priority: int) -> None:
        pass

    def job_completed(self, job_id: UUID, job_type: JobType, execution_time_ms: int) -> None:
        pass

    def job_failed(
        self, job_id: UUID, job_type: JobType, cause: BaseException, attempt: int
    ) -> None:
        pass

    def success_finalization_retried(self, job_id: UUID, job_type: JobType) -> None:
        pass

    def success_finalization_minimal(self, job_id: UUID, job_type: JobType) -> None:
        pass

    def success_finalization_stuck(self, job_id: UUID, job_type: JobType) -> None:
        pass

    def claim_transient_failure(self, reason: str) -> None:
        pass

    def jobs_claimed(self, node_id: str, count: int) -> None:
        pass

    def gate_rejected(self, gate: str, reason: str) -> None:
        pass

    def local_wakeup(self, reason: str) -> None:
        pass

    def execution_target_fallback(self, requested: str, used: str) -> None:
        pass

    def cluster_wakeup_published(self, node_id: str, execution_target: str) -> None:
        pass

    def cluster_wakeup_received(self, node_id: str, execution_target: str) -> None:
        pass

    def callback_failed(
        self, job_id: UUID, job_type: JobType, cause: BaseException, attempt: int
    ) -> None:
        pass

    def signal_waiting(self, job_id: UUID, job_type: JobType, signal_key: str) -> None:
        pass

    def signal_delivered(
        self, job_id: UUID, job_type: JobType, signal_key: str, outcome: SignalOutcome
    ) -> None:
        pass

    def signal_timed_out(self, job_id: UUID, job_type: JobType, signal_key: str) -> None:
        pass

    def signal_cancelled(self, job_id: UUID, job_type: JobType, signal_key: str) -> None:
        pass

    def store_operation(self, store: str, operation: str, outcome: str, duration_ms: int) -> None:
        pass

    def poller_breaker_state(self, poller: str, state: str) -> None:
        pass

    def circuit_breaker_state(self, service: str, old_state: str, new_state: str) -> None:
        pass

    def encryption_integrity_violation(self, job_id: UUID, surface: str) -> None:
        pass

    def encryption_envelope_version_skew(self, job_id: UUID, found: int, expected: int) -> None:
        pass

    def recurring_slots(self, recurring_id: str, outcome: str, count: int) -> None:
        """Optional callback (not part of the ``MetricsCollector`` protocol): slots of a
        recurring definition fired, fired late or skipped."""


__all__ = ["NoOpMetricsCollector", "create_metrics_collector"]


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
    if backend == "prometheus":
        try:
            from ratchet_core.observability.prometheus import PrometheusMetricsCollector
        except ImportError as exc:
            raise ConfigurationError(
                "metrics.backend",
                "prometheus needs prometheus-client: pip install 'ratchet-core[prometheus]' "
                f"({exc})",
            ) from exc
        return PrometheusMetricsCollector(
            port=settings.get(PROMETHEUS_PORT), addr=settings.get(PROMETHEUS_ADDR)
        )
    collector: MetricsCollector = NoOpMetricsCollector()
    return collector
