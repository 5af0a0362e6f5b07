"""The Prometheus exposition (issue 27): ``ratchet metrics serve`` and ``ratchet worker`` with
``metrics.backend=prometheus`` started as processes and scraped over HTTP, on SQLite and
PostgreSQL, after enqueuing known jobs; the WSGI and ASGI apps; the scrape cache."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ratchet_api.model import JobPriority
from ratchet_core.observability.prometheus import (
    StoreSnapshotCache,
    container_registry,
    make_asgi_app,
    make_wsgi_app,
)
from tests.crash.harness import wait_for
from tests.engine import targets
from tests.engine.conftest import build_container, migrate
from tests.store_sql.conftest import empty_tables

REPO = Path(__file__).resolve().parents[2]
RATCHET = str(Path(sys.executable).with_name("ratchet"))

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """``{(sample name, sorted labels): value}`` of an exposition."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    assert key in samples, f"{name}{labels} not exposed; have {sorted(k for k in samples)}"
    return samples[key]


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of every sample of ``name`` whose labels include ``labels``."""
    return sum(
        v for (n, have), v in samples.items() if n == name and set(labels.items()) <= set(have)
    )


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/plain")
        return parse(reply.read().decode())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ratchet(url: str, *args: str, **settings: str) -> subprocess.Popen[str]:
    command = [RATCHET, "--set", f"store.url={url}", "--set", "security.allowed_packages=tests."]
    for key, val in settings.items():
        command += ["--set", f"{key.replace('__', '.')}={val}"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("RATCHET_CONFIG_FILE", None)
    return subprocess.Popen(
        [*command, *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stderr(process: subprocess.Popen[str]) -> str:
    process.wait(10)
    return process.stderr.read() if process.stderr is not None else ""


def stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(10)
    if process.stderr is not None:
        process.stderr.close()


@pytest.fixture
def serve(sql_store_url: str) -> Iterator[tuple[str, int]]:
    """``ratchet metrics serve --port 0 --cache-seconds 0`` on the store: (url, port)."""
    container = build_container(sql_store_url)
    migrate(container.job_store())
    empty_tables(container.job_store().engine)  # the module's database: a test counts its own
    container.job_store().close()
    process = ratchet(
        sql_store_url, "metrics", "serve", "--host", "127.0.0.1", "--port", "0",
        "--cache-seconds", "0",
    )  # fmt: skip
    try:
        assert process.stderr is not None
        line = process.stderr.readline()  # printed once the socket is bound
        assert "/metrics" in line, f"metrics serve did not start: {line}{process.stderr.read()}"
        port = int(line.split("http://127.0.0.1:", 1)[1].split("/", 1)[0])
        yield sql_store_url, port
    finally:
        stop(process)


def test_metrics_serve_exposes_queue_depth_per_target_and_band(serve: tuple[str, int]) -> None:
    url, port = serve
    before = scrape(port)
    assert value(before, "ratchet_store_up") == 1.0
    assert value(before, "ratchet_queue_depth", execution_target="", priority="normal") == 0.0
    assert value(before, "ratchet_queue_stats_exact") == 1.0

    container = build_container(url)
    scheduler = container.scheduler()
    try:
        for n in range(3):
            scheduler.enqueue(targets.add, n, 1)
        scheduler.job(targets.add).args(1, 2).priority(-60).enqueue()
        for _ in range(2):
            scheduler.job(targets.add).args(1, 2).execution_target("gpu").priority(
                JobPriority.HIGH
            ).enqueue()
        scheduler.job(targets.add).args(1, 2).execution_target("gpu").priority(
            JobPriority.CRITICAL
        ).delay(3600).enqueue()
    finally:
        container.job_store().close()

    after = scrape(port)
    depth = "ratchet_queue_depth"
    assert value(after, depth, execution_target="", priority="normal") == 3.0
    assert value(after, depth, execution_target="", priority="low") == 1.0
    assert value(after, depth, execution_target="gpu", priority="high") == 2.0
    assert value(after, depth, execution_target="gpu", priority="critical") == 0.0
    assert value(after, "ratchet_queue_pending", execution_target="gpu", priority="critical") == 1
    assert value(after, "ratchet_queue_depth_total") == 6.0
    assert total(after, "ratchet_queue_pending") == 7.0
    assert value(after, "ratchet_jobs_running", execution_target="gpu") == 0.0
    oldest = value(after, "ratchet_queue_oldest_due_age_seconds", execution_target="")
    assert 0.0 <= oldest < 3600.0
    assert value(after, "ratchet_queue_oldest_due_age_max_seconds") >= oldest
    assert value(after, "ratchet_nodes", state="alive") == 0.0


def test_worker_counters_running_jobs_and_nodes(serve: tuple[str, int], tmp_path: Path) -> None:
    url, port = serve
    worker_port = free_port()
    node = f"prom-{uuid.uuid4().hex[:8]}"
    worker = ratchet(
        url,
        "worker",
        "--no-status",
        "--log-level",
        "WARNING",
        **{
            "node__id": node,
            "metrics__backend": "prometheus",
            "metrics__prometheus__port": str(worker_port),
            "metrics__prometheus__addr": "127.0.0.1",
            "worker__poll_max_interval": "0.1",
            "worker__heartbeat_interval": "0.3",
        },
    )
    container = build_container(url)
    scheduler = container.scheduler()
    marker = tmp_path / "endless.started"
    try:
        for n in range(3):
            scheduler.enqueue(targets.add, n, 1)
        for _ in range(2):
            scheduler.job(targets.fail_always).args("boom").max_retries(0).enqueue()
        scheduler.job(targets.endless).args(str(marker)).execution_target("io").enqueue()

        def worker_counts() -> tuple[float, float]:
            try:
                samples = scrape(worker_port)
            except OSError:
                return (-1.0, -1.0)  # not listening yet
            return (
                total(samples, "ratchet_jobs_completed_total"),
                total(samples, "ratchet_jobs_failed_total"),
            )

        seen: list[tuple[float, float]] = []

        def counted() -> bool:
            seen.append(worker_counts())
            assert worker.poll() is None, f"the worker exited: {_stderr(worker)}"
            return seen[-1] == (3.0, 2.0)

        try:
            wait_for(counted, 60, "the worker's counters (completed, failed): 3, 2")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last seen {seen[-3:]}") from None
        wait_for(marker.exists, 60, "the endless job to start")
        recent = "ratchet_jobs_finished_recent"

        def store_shows_outcomes() -> bool:  # outcomes are written in batches, after counting
            samples = scrape(port)
            return (
                value(samples, recent, execution_target="", status="succeeded") == 3.0
                and value(samples, recent, execution_target="", status="failed") == 2.0
            )

        wait_for(store_shows_outcomes, 60, "the outcomes in the store")
        samples = scrape(port)
        assert value(samples, "ratchet_jobs_running", execution_target="io") == 1.0
        assert value(samples, "ratchet_nodes", state="alive") == 1.0
        assert value(samples, "ratchet_queue_depth_total") == 0.0
        worker_samples = scrape(worker_port)
        assert total(worker_samples, "ratchet_jobs_failed_total", family="APPLICATION") == 2.0
        assert total(worker_samples, "ratchet_jobs_duration_seconds_count") == 3.0
    finally:
        stop(worker)
        container.job_store().close()


def _call_wsgi(app: Any) -> tuple[str, str]:
    environ: dict[str, Any] = {}
    setup_testing_defaults(environ)
    environ["PATH_INFO"] = "/metrics"
    status: list[str] = []

    def start_response(code: str, headers: list[tuple[str, str]], *_: Any) -> Any:
        status.append(code)
        return lambda _data: None

    body = b"".join(app(environ, start_response))
    return status[0], body.decode()


def _call_asgi(app: Any) -> tuple[int, str]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/",
        "query_string": b"",
        "headers": [],
        "http_version": "1.1",
        "asgi": {"version": "3.0"},
    }
    asyncio.run(app(scope, receive, send))
    code = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return code, body.decode()


def test_wsgi_and_asgi_apps_serve_the_store_gauges_and_process_counters(
    sql_container: Any,
) -> None:
    container = sql_container
    scheduler = container.scheduler()
    scheduler.job(targets.add).args(1, 2).execution_target("mail").enqueue()
    code, text = _call_wsgi(make_wsgi_app(container))
    assert code.startswith("200")
    assert value(parse(text), "ratchet_queue_depth", execution_target="mail", priority="normal")
    status, body = _call_asgi(make_asgi_app(container))
    assert status == 200
    assert value(parse(body), "ratchet_queue_depth_total") == 1.0


def test_process_counters_join_the_app_when_the_backend_is_prometheus(sqlite_url: str) -> None:
    container = build_container(sqlite_url, **{"metrics.backend": "prometheus"})
    migrate(container.job_store())
    try:
        collector = container.metrics_collector()
        collector.job_completed(uuid.uuid4(), targets_job_type(), 12)
        samples = parse(_call_wsgi(make_wsgi_app(container))[1])
        assert value(samples, "ratchet_jobs_completed_total", type="STANDARD") == 1.0
        assert value(samples, "ratchet_store_up") == 1.0
    finally:
        container.job_store().close()


def targets_job_type() -> Any:
    from ratchet_api.model import JobType

    return JobType.STANDARD


def test_scrapes_within_the_cache_interval_read_the_store_once(sqlite_url: str) -> None:
    container = build_container(sqlite_url)
    migrate(container.job_store())
    clock = [100.0]
    try:
        cache = StoreSnapshotCache(
            container.job_store(),
            node_timeout=timedelta(seconds=10),
            cache_seconds=5.0,
            clock=lambda: clock[0],
        )
        first = cache.get()
        assert cache.get() is first
        clock[0] += 4.9
        assert cache.get() is first
        assert cache.reads == 1
        container.scheduler().enqueue(targets.add, 1, 2)
        clock[0] += 0.2
        fresh = cache.get()
        assert cache.reads == 2
        assert fresh.stats.total().due == 1 and first.stats.total().due == 0
        registry = container_registry(container, with_process=False)
        assert value(parse(_exposition(registry)), "ratchet_queue_depth_total") == 1.0
    finally:
        container.job_store().close()


def _exposition(registry: Any) -> str:
    from prometheus_client import generate_latest

    return generate_latest(registry).decode()


def test_a_failing_store_is_reported_as_a_metric(tmp_path: Path) -> None:
    container = build_container(f"sqlite:///{tmp_path / 'missing' / 'no.db'}")
    registry = container_registry(container, with_process=False)
    samples = parse(_exposition(registry))
    assert value(samples, "ratchet_store_up") == 0.0
    assert not any(name == "ratchet_queue_depth" for name, _ in samples)


def test_a_port_already_served_does_not_fail_the_process(caplog: pytest.LogCaptureFixture) -> None:
    from ratchet_core.observability.prometheus import PrometheusMetricsCollector

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        collector = PrometheusMetricsCollector(port=port, addr="127.0.0.1")
    assert collector.server is None
    assert f"metrics.prometheus.port {port}" in caplog.text
    collector.job_completed(uuid.uuid4(), targets_job_type(), 5)  # still records
    assert (
        collector.registry.get_sample_value("ratchet_jobs_completed_total", {"type": "STANDARD"})
        == 1.0
    )
    served = PrometheusMetricsCollector(port=free_port(), addr="127.0.0.1")
    try:
        assert served.server is not None
    finally:
        served.close()
    assert served.server is None
