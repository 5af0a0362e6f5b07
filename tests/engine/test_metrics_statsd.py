"""The statsd metrics backend, asserted on a real UDP socket."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any
from uuid import uuid4

import pytest

from ratchet_api.model import JobPriority, JobType
from ratchet_core.defaults.metrics import create_metrics_collector
from ratchet_core.observability.metrics import StatsdMetricsCollector, metric_name
from ratchet_core.runtime.config import DefaultRatchetConfig
from tests.engine import targets
from tests.engine.conftest import build_container, migrate


@pytest.fixture
def udp() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    yield sock
    sock.close()


def received(sock: socket.socket, until: Any = None, timeout: float = 5.0) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = sock.recv(65535)
        except TimeoutError:
            if until is None or until(lines):
                break
            continue
        lines.extend(data.decode().splitlines())
        if until is not None and until(lines):
            break
    return lines


def test_tags_are_encoded_influx_style_and_cleaned() -> None:
    assert metric_name("ratchet.jobs.failed", type="STANDARD", family="IO") == (
        "ratchet.jobs.failed,type=STANDARD,family=IO"
    )
    assert metric_name("m", reason="a,b=c:d|e f") == "m,reason=a_b_c_d_e_f"


def test_config_selects_noop_by_default_and_statsd_on_request(udp: socket.socket) -> None:
    from ratchet_core.defaults.metrics import NoOpMetricsCollector

    assert isinstance(
        create_metrics_collector(DefaultRatchetConfig.from_dict({})), NoOpMetricsCollector
    )
    port = udp.getsockname()[1]
    collector = create_metrics_collector(
        DefaultRatchetConfig.from_dict(
            {
                "metrics.backend": "statsd",
                "metrics.statsd.port": port,
                "metrics.statsd.prefix": "app",
            }
        )
    )
    assert isinstance(collector, StatsdMetricsCollector)
    collector.job_started(uuid4(), JobType.RECURRING, JobPriority.HIGH)
    assert received(udp) == ["app.ratchet.jobs.started,type=RECURRING,priority=HIGH:1|c"]


def test_every_callback_sends_a_datagram(udp: socket.socket) -> None:
    from ratchet_api.spi.runtime import MetricsCollector, SignalOutcome

    collector = StatsdMetricsCollector("127.0.0.1", udp.getsockname()[1])
    assert isinstance(collector, MetricsCollector)
    job = uuid4()
    calls = [
        lambda: collector.job_completed(job, JobType.STANDARD, 12),
        lambda: collector.job_failed(job, JobType.STANDARD, OSError("disk"), 2),
        lambda: collector.success_finalization_retried(job, JobType.STANDARD),
        lambda: collector.success_finalization_minimal(job, JobType.STANDARD),
        lambda: collector.success_finalization_stuck(job, JobType.STANDARD),
        lambda: collector.claim_transient_failure("TransientStoreError"),
        lambda: collector.jobs_claimed("n1", 3),
        lambda: collector.gate_rejected("permits", "full"),
        lambda: collector.local_wakeup("enqueue"),
        lambda: collector.execution_target_fallback("gpu", "default"),
        lambda: collector.cluster_wakeup_published("n1", "gpu"),
        lambda: collector.cluster_wakeup_received("n2", ""),
        lambda: collector.callback_failed(job, JobType.CALLBACK, ValueError("x"), 1),
        lambda: collector.signal_waiting(job, JobType.STANDARD, "k"),
        lambda: collector.signal_delivered(job, JobType.STANDARD, "k", SignalOutcome.DELIVERED),
        lambda: collector.signal_timed_out(job, JobType.STANDARD, "k"),
        lambda: collector.signal_cancelled(job, JobType.STANDARD, "k"),
        lambda: collector.store_operation("SqlJobStore", "claim_next_batch", "success", 3),
        lambda: collector.poller_breaker_state("poller", "OPEN"),
        lambda: collector.circuit_breaker_state("payments", "CLOSED", "OPEN"),
        lambda: collector.encryption_integrity_violation(job, "PAYLOAD"),
        lambda: collector.encryption_envelope_version_skew(job, 1, 2),
    ]
    for call in calls:
        call()
    lines = received(udp, until=lambda got: len(got) >= len(calls) + 1)
    assert "ratchet.jobs.completed,type=STANDARD:1|c" in lines
    assert "ratchet.jobs.duration,type=STANDARD:12.000000|ms" in lines
    assert "ratchet.jobs.failed,type=STANDARD,family=IO:1|c" in lines
    assert "ratchet.jobs.claimed,node=n1:3|c" in lines
    assert "ratchet.circuit_breaker.transitions,service=payments,from=CLOSED,to=OPEN:1|c" in lines
    assert (
        "ratchet.store.operations,store=SqlJobStore,operation=claim_next_batch,outcome=success:3.000000|ms"
        in lines
    )
    assert len(lines) == len(calls) + 1  # job_completed sends a counter and a timer


def test_a_worker_reports_job_metrics_to_statsd(
    sqlite_url: str, udp: socket.socket, make_worker: Any
) -> None:
    container = build_container(
        sqlite_url, **{"metrics.backend": "statsd", "metrics.statsd.port": udp.getsockname()[1]}
    )
    migrate(container.job_store())
    scheduler = container.scheduler()
    scheduler.enqueue(targets.add, 1, 2)
    scheduler.job(targets.fail_always).args("boom").max_retries(0).enqueue()
    make_worker(container).run_until_idle(20)
    lines = received(udp)  # everything was sent before run_until_idle returned
    names = {line.split(":", 1)[0] for line in lines}
    assert "ratchet.jobs.started,type=STANDARD,priority=NORMAL" in names
    assert "ratchet.jobs.completed,type=STANDARD" in names
    assert "ratchet.jobs.duration,type=STANDARD" in names
    assert "ratchet.jobs.failed,type=STANDARD,family=APPLICATION" in names
    assert any(n.startswith("ratchet.jobs.claimed,node=") for n in names)
    assert any(
        n.startswith("ratchet.store.operations,store=SqlJobStore,operation=claim_next_batch")
        for n in names
    )
    assert any(
        n.startswith("ratchet.store.operations,store=SqlJobStore,operation=mark_succeeded_many")
        for n in names
    )
    container.job_store().close()
