"""OpenTelemetry with the SDK's in-memory exporter and reader: the enqueue span and every
execution span of the job are linked through the trace context stored with the job (a retried
attempt included), and ``metrics.backend = otel`` records the worker's metrics through the OTel
metrics API."""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from ratchet_api.errors import ConfigurationError
from ratchet_api.model import BackoffPolicy, JobStatus
from ratchet_api.store.protocols import JobStore
from ratchet_core.observability.tracing import TRACE_KEY
from ratchet_core.payload.envelope import is_envelope
from tests.engine import targets
from tests.engine.conftest import build_container, migrate
from tests.engine.worker_fixtures import fast_settings

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace", reason="opentelemetry-sdk missing")
from opentelemetry import metrics, trace  # noqa: E402
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

EXPORTER = InMemorySpanExporter()
READER = InMemoryMetricReader()


@pytest.fixture(scope="module", autouse=True)
def otel_sdk() -> None:
    """The process's global providers (OpenTelemetry lets them be set once per process)."""
    if not isinstance(trace.get_tracer_provider(), sdk_trace.TracerProvider):
        provider = sdk_trace.TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
    if not isinstance(metrics.get_meter_provider(), MeterProvider):
        metrics.set_meter_provider(MeterProvider(metric_readers=[READER]))


@pytest.fixture
def traced(sqlite_url: str) -> Iterator[Any]:
    container = build_container(sqlite_url, **{"tracing.enabled": "true"})
    store: JobStore = container.job_store()
    migrate(store)
    EXPORTER.clear()
    yield container
    container.shutdown_resources()
    store.close()


def run_worker(container: Any) -> None:
    worker = container.worker(worker_settings=fast_settings())
    try:
        worker.run_until_idle(30)
    finally:
        worker.stop(timeout=5)


def test_enqueue_and_every_attempt_share_one_trace(traced: Any) -> None:
    scheduler = traced.scheduler()
    key = f"otel-{uuid.uuid4().hex}"
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("http request") as request:
        job_id = (
            scheduler.job(targets.flaky)
            .args(key, 1)
            .max_retries(1)
            .backoff(BackoffPolicy.fixed(0.05))
            .enqueue()
        )
    stored = traced.job_store().find_by_id(job_id)
    assert TRACE_KEY in json.loads(stored.payload)
    run_worker(traced)
    assert traced.job_store().find_by_id(job_id).status is JobStatus.SUCCEEDED

    spans = EXPORTER.get_finished_spans()
    (enqueue,) = [s for s in spans if s.name == "ratchet enqueue tests.engine.targets:flaky"]
    executions = sorted(
        (s for s in spans if s.name == "ratchet execute tests.engine.targets:flaky"),
        key=lambda s: s.attributes["ratchet.job.attempt"],
    )
    trace_id = request.get_span_context().trace_id
    assert enqueue.kind is SpanKind.PRODUCER
    assert enqueue.context.trace_id == trace_id
    assert enqueue.parent.span_id == request.get_span_context().span_id
    assert [s.attributes["ratchet.job.attempt"] for s in executions] == [1, 2]
    for span in executions:
        assert span.kind is SpanKind.CONSUMER
        assert span.context.trace_id == trace_id
        assert span.parent is not None and span.parent.span_id == enqueue.context.span_id
        assert span.attributes["ratchet.job.id"] == str(job_id)
    assert executions[0].status.status_code is StatusCode.ERROR
    assert any(e.name == "exception" for e in executions[0].events)
    assert executions[1].status.status_code is not StatusCode.ERROR


def test_bulk_enqueue_is_one_span_parent_of_each_execution(traced: Any) -> None:
    scheduler = traced.scheduler()
    ids = scheduler.enqueue_many(targets.add, [(1, 2), (3, 4), (5, 6)])
    run_worker(traced)
    spans = EXPORTER.get_finished_spans()
    (enqueue,) = [s for s in spans if s.name == "ratchet enqueue tests.engine.targets:add"]
    assert enqueue.attributes["ratchet.job.count"] == 3
    executions = [s for s in spans if s.name == "ratchet execute tests.engine.targets:add"]
    assert sorted(s.attributes["ratchet.job.id"] for s in executions) == sorted(map(str, ids))
    assert {s.parent.span_id for s in executions} == {enqueue.context.span_id}


@pytest.mark.parametrize("kind", ["single", "workflow"])
def test_an_encrypted_jobs_span_has_its_enqueue_span_as_parent(sqlite_url: str, kind: str) -> None:
    """The trace context is sealed with the payload; the worker reads it from the opened
    payload, so the execution span of an encrypted job still has its enqueue span as parent
    (a workflow's nodes too: each is sealed under its final id)."""
    key = base64.b64encode(os.urandom(32)).decode()
    container = build_container(
        sqlite_url, **{"tracing.enabled": "true", "encryption.keys": f"k1:{key}"}
    )
    store: JobStore = container.job_store()
    migrate(store)
    EXPORTER.clear()
    try:
        scheduler = container.scheduler()
        if kind == "single":
            job_id = scheduler.enqueue(targets.add, 2, 3)
        else:
            job_id = scheduler.job(targets.add).args(2, 3).then(targets.noop).enqueue()
        assert is_envelope(store.find_by_id(job_id).payload)
        run_worker(container)
        assert store.find_by_id(job_id).status is JobStatus.SUCCEEDED
        spans = EXPORTER.get_finished_spans()
        (enqueue,) = [s for s in spans if s.name == "ratchet enqueue tests.engine.targets:add"]
        (execution,) = [s for s in spans if s.name == "ratchet execute tests.engine.targets:add"]
        assert execution.attributes["ratchet.job.id"] == str(job_id)
        assert execution.context.trace_id == enqueue.context.trace_id
        assert execution.parent is not None
        assert execution.parent.span_id == enqueue.context.span_id
    finally:
        container.shutdown_resources()
        store.close()


def test_without_tracing_payloads_carry_no_trace_context(sqlite_url: str) -> None:
    container = build_container(sqlite_url)
    store: JobStore = container.job_store()
    migrate(store)
    try:
        with trace.get_tracer("test").start_as_current_span("request"):
            job_id = container.scheduler().enqueue(targets.add, 1, 2)
        assert TRACE_KEY not in json.loads(store.find_by_id(job_id).payload)
    finally:
        store.close()


def _points(name: str) -> list[Any]:
    data = READER.get_metrics_data()
    found = []
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    found.extend(metric.data.data_points)
    return found


def test_otel_metrics_backend_records_the_worker_metrics(sqlite_url: str) -> None:
    container = build_container(sqlite_url, **{"metrics.backend": "otel"})
    store: JobStore = container.job_store()
    migrate(store)
    try:
        before = sum(p.value for p in _points("ratchet.jobs.completed"))
        container.scheduler().enqueue_many(targets.add, [(1, 1), (2, 2)])
        run_worker(container)
        completed = _points("ratchet.jobs.completed")
        assert sum(p.value for p in completed) - before == 2
        assert {p.attributes["type"] for p in completed} == {"STANDARD"}
        durations = _points("ratchet.jobs.duration")
        assert durations and sum(p.count for p in durations) >= 2
        assert _points("ratchet.store.operations")
    finally:
        container.shutdown_resources()
        store.close()


def test_tracing_without_opentelemetry_is_a_configuration_error(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    container = build_container(sqlite_url, **{"tracing.enabled": "true"})
    with pytest.raises(ConfigurationError, match=r"tracing.enabled.*ratchet-core\[otel\]"):
        container.scheduler()
