"""Metrics backends: the container's ``metrics_collector`` factory and the statsd collector.

``metrics.backend`` selects the implementation: ``noop`` (the default, nothing is sent) or
``statsd`` (UDP datagrams through the ``statsd`` package to ``metrics.statsd.host:port``).

Names follow Micrometer's dotted style (``ratchet.jobs.started``). The plain statsd protocol has
no tags, so tags are encoded in the metric name the way Telegraf's statsd input (InfluxDB line
style) reads them: ``ratchet.jobs.failed,type=STANDARD,family=IO:1|c``. Tag values are cleaned of
the characters that would break that format (``,``, ``=``, ``:``, ``|``, ``@``, spaces).
"""

from __future__ import annotations

import logging
import re
from uuid import UUID

from ratchet_api.model import ExceptionFamily, JobPriority, JobType
from ratchet_api.spi.runtime import (
    RatchetConfigKey,
    SignalOutcome,
)
from ratchet_core.runtime.config import parse_float, parse_int, parse_str, register_key

_log = logging.getLogger("ratchet.metrics")

_BACKENDS = ("noop", "statsd", "otel", "prometheus")


def _parse_backend(raw: str) -> str:
    value = raw.strip().lower()
    if value not in _BACKENDS:
        raise ValueError(f"expected one of {', '.join(_BACKENDS)}, got {raw!r}")
    return value


METRICS_BACKEND = register_key(
    RatchetConfigKey(
        "metrics.backend",
        _parse_backend,
        "noop",
        "Metrics backend: noop (default, nothing is recorded), statsd, otel (the OpenTelemetry "
        "metrics API; needs ratchet-core[otel]) or prometheus (prometheus-client counters; "
        "needs ratchet-core[prometheus]).",
    )
)
STATSD_HOST = register_key(
    RatchetConfigKey(
        "metrics.statsd.host", parse_str, "127.0.0.1", "Host of the statsd (or Telegraf) daemon."
    )
)
STATSD_PORT = register_key(
    RatchetConfigKey(
        "metrics.statsd.port",
        parse_int(1, 65535),
        8125,
        "UDP port of the statsd daemon.",
    )
)
STATSD_PREFIX = register_key(
    RatchetConfigKey(
        "metrics.statsd.prefix",
        parse_str,
        "",
        "Prefix put before every metric name (empty: names start with 'ratchet.').",
    )
)

PROMETHEUS_PORT = register_key(
    RatchetConfigKey(
        "metrics.prometheus.port",
        parse_int(0, 65535),
        0,
        "With metrics.backend = prometheus: the port a process serves its own counters on "
        "(0: not served; mount make_wsgi_app/make_asgi_app or run ratchet metrics serve).",
    )
)
PROMETHEUS_ADDR = register_key(
    RatchetConfigKey(
        "metrics.prometheus.addr",
        parse_str,
        "0.0.0.0",
        "Interface of the metrics.prometheus.port server.",
    )
)
PROMETHEUS_CACHE = register_key(
    RatchetConfigKey(
        "metrics.prometheus.cache_seconds",
        parse_float(0.0, 3600.0),
        5.0,
        "How long the store gauges of one scrape are reused by the next scrapes (seconds).",
    )
)
PROMETHEUS_WINDOW = register_key(
    RatchetConfigKey(
        "metrics.prometheus.window_seconds",
        parse_float(1.0, 86400.0),
        300.0,
        "Window of the ratchet_jobs_finished_recent gauge (seconds).",
    )
)


_UNSAFE = re.compile(r"[,=:|@#\s]")


def _clean(value: object) -> str:
    text = str(value)
    return _UNSAFE.sub("_", text) or "none"


def metric_name(name: str, **tags: object) -> str:
    """``name`` with Influx-style tags: ``metric_name("ratchet.jobs.started", type="STANDARD")``
    is ``"ratchet.jobs.started,type=STANDARD"``. Tags keep their keyword order."""
    if not tags:
        return name
    return name + "".join(f",{key}={_clean(value)}" for key, value in tags.items())


class StatsdMetricsCollector:
    """``MetricsCollector`` that sends every callback to statsd over UDP.

    Thread safe (one UDP socket; each datagram is one ``sendto``) and never raises: a send
    failure is logged at debug level and dropped, since metrics must not fail a job.

    Meter catalog (counters unless noted; tags in brackets):

    ============================================  ==========================================
    callback                                      metric
    ============================================  ==========================================
    job_started                                   ``ratchet.jobs.started`` [type, priority]
    job_completed                                 ``ratchet.jobs.completed`` [type];
                                                  timer ``ratchet.jobs.duration`` [type]
    job_failed                                    ``ratchet.jobs.failed`` [type, family]
    success_finalization_retried/minimal/stuck    ``ratchet.jobs.finalization`` [type, outcome]
    claim_transient_failure                       ``ratchet.claims.transient_failures`` [reason]
    jobs_claimed                                  ``ratchet.jobs.claimed`` (by count) [node]
    gate_rejected                                 ``ratchet.gates.rejected`` [gate, reason]
    local_wakeup                                  ``ratchet.wakeups.local`` [reason]
    execution_target_fallback                     ``ratchet.execution_targets.fallback``
                                                  [requested, used]
    cluster_wakeup_published / received           ``ratchet.wakeups.cluster.published`` /
                                                  ``.received`` [node, target]
    callback_failed                               ``ratchet.callbacks.failed`` [type, family]
    signal_waiting / timed_out / cancelled        ``ratchet.signals.waiting`` / ``.timed_out`` /
                                                  ``.cancelled`` [type]
    signal_delivered                              ``ratchet.signals.delivered`` [type, outcome]
    store_operation                               timer ``ratchet.store.operations``
                                                  [store, operation, outcome]
    poller_breaker_state                          ``ratchet.poller.breaker.transitions``
                                                  [poller, state]
    circuit_breaker_state                         ``ratchet.circuit_breaker.transitions``
                                                  [service, from, to]
    encryption_integrity_violation                ``ratchet.encryption.integrity_violations``
                                                  [surface]
    encryption_envelope_version_skew              ``ratchet.encryption.version_skew``
                                                  [found, expected]
    recurring_slots (optional callback)           ``ratchet.recurring.slots`` (by count)
                                                  [recurring, outcome]
    ============================================  ==========================================
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 8125, prefix: str | None = None):
        import statsd

        self._client = statsd.StatsClient(host=host, port=port, prefix=prefix)
        self.host = host
        self.port = port
        self.prefix = prefix

    # ------------------------------------------------------------ sending

    def _incr(self, name: str, count: int = 1, **tags: object) -> None:
        try:
            self._client.incr(metric_name(name, **tags), count)
        except Exception:  # noqa: BLE001 - metrics never fail the caller
            _log.debug("statsd send of %s failed", name, exc_info=True)

    def _timing(self, name: str, millis: int, **tags: object) -> None:
        try:
            self._client.timing(metric_name(name, **tags), max(0, millis))
        except Exception:  # noqa: BLE001 - metrics never fail the caller
            _log.debug("statsd send of %s failed", name, exc_info=True)

    def close(self) -> None:
        """Close the UDP socket. Idempotent."""
        sock = getattr(self._client, "_sock", None)
        if sock is not None:
            sock.close()

    # ------------------------------------------------------------ job execution

    def job_started(self, job_id: UUID, job_type: JobType, priority: int) -> None:
        self._incr("ratchet.jobs.started", type=job_type.value, priority=_priority(priority))

    def job_completed(self, job_id: UUID, job_type: JobType, execution_time_ms: int) -> None:
        self._incr("ratchet.jobs.completed", type=job_type.value)
        self._timing("ratchet.jobs.duration", execution_time_ms, type=job_type.value)

    def job_failed(
        self, job_id: UUID, job_type: JobType, cause: BaseException, attempt: int
    ) -> None:
        self._incr(
            "ratchet.jobs.failed",
            type=job_type.value,
            family=ExceptionFamily.classify(cause).value,
        )

    # ------------------------------------------------------------ success finalization

    def success_finalization_retried(self, job_id: UUID, job_type: JobType) -> None:
        self._incr("ratchet.jobs.finalization", type=job_type.value, outcome="retried")

    def success_finalization_minimal(self, job_id: UUID, job_type: JobType) -> None:
        self._incr("ratchet.jobs.finalization", type=job_type.value, outcome="minimal")

    def success_finalization_stuck(self, job_id: UUID, job_type: JobType) -> None:
        self._incr("ratchet.jobs.finalization", type=job_type.value, outcome="stuck")

    # ------------------------------------------------------------ claims and admission

    def claim_transient_failure(self, reason: str) -> None:
        self._incr("ratchet.claims.transient_failures", reason=reason)

    def jobs_claimed(self, node_id: str, count: int) -> None:
        if count > 0:
            self._incr("ratchet.jobs.claimed", count, node=node_id)

    def gate_rejected(self, gate: str, reason: str) -> None:
        self._incr("ratchet.gates.rejected", gate=gate, reason=reason)

    # ------------------------------------------------------------ wake-ups and routing

    def local_wakeup(self, reason: str) -> None:
        self._incr("ratchet.wakeups.local", reason=reason)

    def execution_target_fallback(self, requested: str, used: str) -> None:
        self._incr("ratchet.execution_targets.fallback", requested=requested, used=used)

    def cluster_wakeup_published(self, node_id: str, execution_target: str) -> None:
        self._incr("ratchet.wakeups.cluster.published", node=node_id, target=execution_target)

    def cluster_wakeup_received(self, node_id: str, execution_target: str) -> None:
        self._incr("ratchet.wakeups.cluster.received", node=node_id, target=execution_target)

    # ------------------------------------------------------------ callbacks and signals

    def callback_failed(
        self, job_id: UUID, job_type: JobType, cause: BaseException, attempt: int
    ) -> None:
        self._incr(
            "ratchet.callbacks.failed",
            type=job_type.value,
            family=ExceptionFamily.classify(cause).value,
        )

    def signal_waiting(self, job_id: UUID, job_type: JobType, signal_key: str) -> None:
        self._incr("ratchet.signals.waiting", type=job_type.value)

    def signal_delivered(
        self, job_id: UUID, job_type: JobType, signal_key: str, outcome: SignalOutcome
    ) -> None:
        self._incr("ratchet.signals.delivered", type=job_type.value, outcome=outcome.value)

    def signal_timed_out(self, job_id: UUID, job_type: JobType, signal_key: str) -> None:
        self._incr("ratchet.signals.timed_out", type=job_type.value)

    def signal_cancelled(self, job_id: UUID, job_type: JobType, signal_key: str) -> None:
        self._incr("ratchet.signals.cancelled", type=job_type.value)

    # ------------------------------------------------------------ store, breakers, encryption

    def store_operation(self, store: str, operation: str, outcome: str, duration_ms: int) -> None:
        self._timing(
            "ratchet.store.operations",
            duration_ms,
            store=store,
            operation=operation,
            outcome=outcome,
        )

    def poller_breaker_state(self, poller: str, state: str) -> None:
        self._incr("ratchet.poller.breaker.transitions", poller=poller, state=state)

    def circuit_breaker_state(self, service: str, old_state: str, new_state: str) -> None:
        tags: dict[str, object] = {"service": service, "from": old_state, "to": new_state}
        self._incr("ratchet.circuit_breaker.transitions", 1, **tags)

    def encryption_integrity_violation(self, job_id: UUID, surface: str) -> None:
        self._incr("ratchet.encryption.integrity_violations", surface=surface)

    def encryption_envelope_version_skew(self, job_id: UUID, found: int, expected: int) -> None:
        self._incr("ratchet.encryption.version_skew", found=found, expected=expected)

    # ------------------------------------------------------------ recurring jobs

    def recurring_slots(self, recurring_id: str, outcome: str, count: int) -> None:
        """Slots of a recurring definition: ``fired`` (on time), ``late`` (catch-up of a
        misfire), ``skipped`` (misfire policy, catch-up bound or ``max_instances``)."""
        self._incr("ratchet.recurring.slots", count, recurring=recurring_id, outcome=outcome)


def _priority(priority: JobPriority | int) -> str:
    try:
        return JobPriority(priority).name
    except ValueError:
        return str(int(priority))


__all__ = [
    "METRICS_BACKEND",
    "PROMETHEUS_ADDR",
    "PROMETHEUS_CACHE",
    "PROMETHEUS_PORT",
    "PROMETHEUS_WINDOW",
    "STATSD_HOST",
    "STATSD_PORT",
    "STATSD_PREFIX",
    "StatsdMetricsCollector",
    "metric_name",
]
