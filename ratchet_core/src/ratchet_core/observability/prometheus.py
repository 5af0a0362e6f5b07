"""Prometheus exposition (extra ``ratchet-core[prometheus]``, the ``prometheus-client`` library).

Two sources, one registry:

* :class:`StoreMetrics`: gauges read from the store when scraped (the whole cluster, whatever
  process serves them): due jobs per execution target and priority band, the age of the oldest
  due job, running jobs, finished jobs over a recent window, worker nodes. One
  ``QueueStatsStore.queue_stats`` read and one node read per scrape, cached for
  ``cache_seconds`` so that many scrapers (several Prometheus replicas, a KEDA operator) cost
  the database one read per interval.
* :class:`PrometheusMetricsCollector`: the ``MetricsCollector`` of ``metrics.backend =
  prometheus``, counters and histograms of what *this process* did (jobs completed and failed,
  claims, store operations...), the statsd collector's names with ``_`` for ``.``. With
  ``metrics.prometheus.port`` set, a worker process serves them on that port.

``ratchet metrics serve`` serves the store gauges; :func:`make_wsgi_app` and
:func:`make_asgi_app` give the same (plus this process's counters when its metrics backend is
``prometheus``) to mount in a web application. Names and labels: ``docs/metrics.md``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client import make_asgi_app as _make_asgi_app
from prometheus_client import make_wsgi_app as _make_wsgi_app
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ratchet_api.model import JobPriority
from ratchet_api.store.protocols import JobStore
from ratchet_api.store.queues import PRIORITY_BANDS, QueueCounts, QueueStats
from ratchet_core.observability.metrics import (
    PROMETHEUS_CACHE,
    PROMETHEUS_WINDOW,
    StatsdMetricsCollector,
)
from ratchet_core.observability.queues import read_queue_stats

_log = logging.getLogger("ratchet.metrics")

PRIORITY_LABELS: dict[JobPriority, str] = {band: band.name.lower() for band in PRIORITY_BANDS}
"""The ``priority`` label value of each band: ``low``, ``normal``, ``high``, ``critical``."""


@attrs.frozen(kw_only=True)
class StoreSnapshot:
    """What one scrape read from the store."""

    stats: QueueStats
    nodes_alive: int
    nodes_silent: int
    read_seconds: float


class StoreSnapshotCache:
    """Reads a :class:`StoreSnapshot` at most once per ``cache_seconds``. Thread safe:
    concurrent scrapes wait for the one read in flight instead of starting their own."""

    def __init__(
        self,
        store: JobStore,
        *,
        node_timeout: timedelta,
        cache_seconds: float = 5.0,
        window: timedelta = timedelta(minutes=5),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._node_timeout = node_timeout
        self._cache_seconds = cache_seconds
        self.window = window
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshot: StoreSnapshot | None = None
        self._read_at = 0.0
        self.reads = 0
        """Store reads so far (a scrape served from the cache does not count)."""

    def get(self) -> StoreSnapshot:
        with self._lock:
            now = self._clock()
            if self._snapshot is not None and now - self._read_at < self._cache_seconds:
                return self._snapshot
            started = time.perf_counter()
            # the window's start on this host's clock (a skew only shifts its edge); due
            # times and ages are the store's clock, read in the same statement
            stats = read_queue_stats(self._store, datetime.now(UTC) - self.window)
            nodes = self._store.find_all_nodes()
            alive = sum(1 for n in nodes if stats.now - n.last_heartbeat <= self._node_timeout)
            self._snapshot = StoreSnapshot(
                stats=stats,
                nodes_alive=alive,
                nodes_silent=len(nodes) - alive,
                read_seconds=time.perf_counter() - started,
            )
            self._read_at = self._clock()
            self.reads += 1
            return self._snapshot


class StoreMetrics(Collector):
    """The store gauges as a ``prometheus_client`` collector (register it in a registry).

    A failed store read yields ``ratchet_store_up 0`` alone (and logs the error), so a
    database outage shows as a metric, not as a failed scrape."""

    def __init__(self, cache: StoreSnapshotCache) -> None:
        self._cache = cache

    def describe(self) -> Iterable[Metric]:
        return []  # no store read when the collector is registered

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("ratchet_store_up", "1 when the store answered the last read.")
        try:
            snap = self._cache.get()
        except Exception:  # noqa: BLE001 - an outage is reported as a metric
            _log.warning("reading queue statistics for Prometheus failed", exc_info=True)
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        yield up
        yield from _queue_families(snap, self._cache.window)


def _queue_families(snap: StoreSnapshot, window: timedelta) -> Iterator[Metric]:
    stats = snap.stats
    by_band = stats.grouped(lambda r: (r.execution_target or "", r.priority_band))
    by_label = stats.grouped(lambda r: r.execution_target or "")
    depth = GaugeMetricFamily(
        "ratchet_queue_depth",
        "PENDING jobs due now (claimable), per execution target and priority band.",
        labels=["execution_target", "priority"],
    )
    pending = GaugeMetricFamily(
        "ratchet_queue_pending",
        "PENDING jobs, due or scheduled later, per execution target and priority band.",
        labels=["execution_target", "priority"],
    )
    # every band of every execution target seen (and of jobs without one) has a sample, 0
    # included: a query over an absent series returns nothing, which autoscalers treat apart
    labels = sorted({""} | set(by_label))
    for label in labels:
        for band in PRIORITY_BANDS:
            counts = by_band.get((label, band))
            values = [label, PRIORITY_LABELS[band]]
            depth.add_metric(values, float(counts.due) if counts else 0.0)
            pending.add_metric(values, float(counts.pending) if counts else 0.0)
    oldest = GaugeMetricFamily(
        "ratchet_queue_oldest_due_age_seconds",
        "How long the oldest due PENDING job has waited past its due time (0: none due).",
        labels=["execution_target"],
    )
    running = GaugeMetricFamily(
        "ratchet_jobs_running", "RUNNING jobs per execution target.", labels=["execution_target"]
    )
    finished = GaugeMetricFamily(
        "ratchet_jobs_finished_recent",
        f"Jobs that finished in the last {window.total_seconds():g} seconds, per execution "
        "target and status (succeeded, failed).",
        labels=["execution_target", "status"],
    )
    for label in labels:
        counts = by_label.get(label, QueueCounts())
        oldest.add_metric([label], stats.oldest_due_age(counts).total_seconds())
        running.add_metric([label], float(counts.running))
        finished.add_metric([label, "succeeded"], float(counts.succeeded))
        finished.add_metric([label, "failed"], float(counts.failed))
    yield depth
    yield pending
    yield oldest
    yield running
    yield finished
    total = stats.total()
    yield GaugeMetricFamily(
        "ratchet_queue_depth_total",
        "PENDING jobs due now, every execution target.",
        value=total.due,
    )
    yield GaugeMetricFamily(
        "ratchet_queue_oldest_due_age_max_seconds",
        "Age of the oldest due PENDING job of any execution target (0: none due).",
        value=stats.oldest_due_age(total).total_seconds(),
    )
    nodes = GaugeMetricFamily("ratchet_nodes", "Worker nodes by heartbeat state.", labels=["state"])
    nodes.add_metric(["alive"], float(snap.nodes_alive))
    nodes.add_metric(["silent"], float(snap.nodes_silent))
    yield nodes
    yield GaugeMetricFamily(
        "ratchet_queue_stats_exact",
        "1 when the queue figures cover every job; 0 when they are those of a bounded scan "
        "that stopped short (a store without QueueStatsStore).",
        value=1.0 if stats.exact else 0.0,
    )
    yield GaugeMetricFamily(
        "ratchet_queue_stats_read_seconds",
        "Time the last store read of these gauges took.",
        value=snap.read_seconds,
    )


class PrometheusMetricsCollector(StatsdMetricsCollector):
    """``MetricsCollector`` recording into ``prometheus_client`` counters and histograms
    (``metrics.backend = prometheus``). Thread safe, never raises.

    Reuses the statsd collector's mapping of callbacks to names and tags: ``ratchet.jobs.
    completed`` [type] becomes the counter ``ratchet_jobs_completed_total{type}`` (the
    throughput: jobs that succeeded), ``ratchet.jobs.failed`` [type, family]
    ``ratchet_jobs_failed_total`` (every failed attempt), timers become histograms in seconds
    (``ratchet_jobs_duration_seconds``, ``ratchet_store_operations_seconds``)."""

    def __init__(
        self, registry: CollectorRegistry | None = None, *, port: int = 0, addr: str = "0.0.0.0"
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self._metrics: dict[str, Any] = {}
        self._metrics_lock = threading.Lock()
        self.server: Any = None
        if port:
            from prometheus_client import start_http_server

            try:
                self.server = start_http_server(port, addr, registry=self.registry)
            except OSError as exc:
                # another process of the pod (the worker, when this is a `ratchet jobs` run
                # by hand with the same environment) serves the port: record, do not fail
                _log.warning(
                    "metrics.prometheus.port %s on %s cannot be served (%s): this process's "
                    "counters are recorded but not exposed",
                    port,
                    addr,
                    exc,
                )

    def _metric(self, name: str, kind: str, labels: tuple[str, ...]) -> Any:
        found = self._metrics.get(name)
        if found is None:
            with self._metrics_lock:
                found = self._metrics.get(name)
                if found is None:
                    flat = name.replace(".", "_")
                    if kind == "counter":
                        found = Counter(flat, f"{name} (Ratchet)", labels, registry=self.registry)
                    else:
                        found = Histogram(
                            f"{flat}_seconds", f"{name} (Ratchet)", labels, registry=self.registry
                        )
                    self._metrics[name] = found
        return found

    def _incr(self, name: str, count: int = 1, **tags: object) -> None:
        try:
            metric = self._metric(name, "counter", tuple(tags))
            (metric.labels(**{k: str(v) for k, v in tags.items()}) if tags else metric).inc(count)
        except Exception:  # noqa: BLE001 - metrics never fail the caller
            _log.debug("recording %s failed", name, exc_info=True)

    def _timing(self, name: str, millis: int, **tags: object) -> None:
        try:
            metric = self._metric(name, "histogram", tuple(tags))
            target = metric.labels(**{k: str(v) for k, v in tags.items()}) if tags else metric
            target.observe(max(0, millis) / 1000.0)
        except Exception:  # noqa: BLE001 - metrics never fail the caller
            _log.debug("recording %s failed", name, exc_info=True)

    def close(self) -> None:
        """Stop the port server, if one was started. Idempotent."""
        server, self.server = self.server, None
        if isinstance(server, tuple) and server:
            server = server[0]
        if server is not None and hasattr(server, "shutdown"):
            server.shutdown()
            server.server_close()


class _RegistryCollector(Collector):
    """Another registry's metrics, as one collector of this registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        yield from self._registry.collect()


def store_registry(
    store: JobStore,
    *,
    node_timeout: timedelta,
    cache_seconds: float = 5.0,
    window: timedelta = timedelta(minutes=5),
    process: PrometheusMetricsCollector | None = None,
) -> CollectorRegistry:
    """A registry with the store gauges of ``store`` (and ``process``'s counters)."""
    registry = CollectorRegistry(auto_describe=False)
    cache = StoreSnapshotCache(
        store, node_timeout=node_timeout, cache_seconds=cache_seconds, window=window
    )
    registry.register(StoreMetrics(cache))
    if process is not None:
        registry.register(_RegistryCollector(process.registry))
    return registry


def container_registry(container: Any, *, with_process: bool = True) -> CollectorRegistry:
    """The registry of a Ratchet container: its store's gauges with the configured cache and
    window, plus this process's counters when ``with_process`` and ``metrics.backend`` is
    ``prometheus``."""
    from ratchet_core.worker.settings import WORKER_NODE_TIMEOUT

    settings = container.settings()
    process = None
    if with_process:
        collector = container.metrics_collector()
        if isinstance(collector, PrometheusMetricsCollector):
            process = collector
    return store_registry(
        container.job_store(),
        node_timeout=settings.get(WORKER_NODE_TIMEOUT),
        cache_seconds=settings.get(PROMETHEUS_CACHE),
        window=timedelta(seconds=settings.get(PROMETHEUS_WINDOW)),
        process=process,
    )


def make_wsgi_app(container: Any) -> Callable[..., Any]:
    """A WSGI app serving the metrics of ``container`` in the Prometheus text format (mount it
    at e.g. ``/metrics``; it answers every path it is given)."""
    return _make_wsgi_app(container_registry(container))


def make_asgi_app(container: Any) -> Callable[..., Any]:
    """An ASGI app serving the metrics of ``container`` (mount it, e.g. with FastAPI's
    ``app.mount("/metrics", make_asgi_app(container))``)."""
    return _make_asgi_app(container_registry(container))


__all__ = [
    "PRIORITY_LABELS",
    "PrometheusMetricsCollector",
    "StoreMetrics",
    "StoreSnapshot",
    "StoreSnapshotCache",
    "container_registry",
    "make_asgi_app",
    "make_wsgi_app",
    "store_registry",
]
