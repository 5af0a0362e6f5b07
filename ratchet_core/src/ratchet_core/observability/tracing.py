"""Tracing of enqueue and execution with OpenTelemetry (``tracing.enabled``, extra
``ratchet-core[otel]``).

With tracing on, enqueueing opens a span ``ratchet enqueue <target>`` (kind PRODUCER) and stores
its W3C trace context (``traceparent``) in the job's payload document (key ``tc``, ignored by
every reader of the payload); each execution attempt runs inside a span ``ratchet execute
<target>`` (kind CONSUMER) whose parent is that stored context, so a trace shows the enqueue and
every attempt of the job, whatever process ran it. A failing attempt's span records the
exception and has status ERROR. Spans go to the global ``TracerProvider`` (tracer ``ratchet``):
the application configures the SDK and exporters.

The trace context is stamped before the payload is sealed, so for an encrypted job it is inside
the envelope: the execution span reads it from the opened payload (the ``PayloadCodec`` the
worker gives :func:`tracing_from_config`), and an encrypted job's span has its enqueue span as
parent like any other job's.

With tracing off (the default) nothing is added to payloads and no span is made.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from ratchet_api.errors import ConfigurationError, RatchetError
from ratchet_api.spi.runtime import RatchetConfig, RatchetConfigKey
from ratchet_api.store.entities import JobEntity
from ratchet_core.runtime.config import parse_bool, register_key

if TYPE_CHECKING:
    from ratchet_core.payload.codec import PayloadCodec

TRACING_ENABLED = register_key(
    RatchetConfigKey(
        "tracing.enabled",
        parse_bool,
        False,
        "OpenTelemetry spans for enqueue and for each execution, linked through a trace "
        "context stored with the job (needs ratchet-core[otel]).",
    )
)
TRACE_KEY = "tc"
"""Key of the trace context in the stored payload document."""


class Tracing:
    """No tracing: every method is a pass-through (the default)."""

    enabled = False

    def enqueue(self, target: str, count: int = 1) -> AbstractContextManager[None]:
        """Context of an enqueue of ``count`` jobs of ``target``."""
        return nullcontext()

    def stamp(self, payload: str) -> str:
        """``payload`` with the current trace context added (unchanged without tracing)."""
        return payload

    def wrap(self, job: JobEntity, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` run inside the job's execution span (itself without tracing)."""
        return function


class OpenTelemetryTracing(Tracing):
    """Spans through the OpenTelemetry API. Thread safe."""

    enabled = True

    def __init__(self, tracer_provider: Any = None, codec: PayloadCodec | None = None) -> None:
        from opentelemetry import propagate, trace

        self._codec = codec  # opens the payload of an encrypted job (its trace context)
        self._trace = trace
        self._propagate = propagate
        provider = tracer_provider or trace.get_tracer_provider()
        self._tracer = provider.get_tracer("ratchet")

    @contextmanager
    def _enqueue(self, target: str, count: int) -> Iterator[None]:
        with self._tracer.start_as_current_span(
            f"ratchet enqueue {target}",
            kind=self._trace.SpanKind.PRODUCER,
            attributes={"ratchet.job.target": target, "ratchet.job.count": count},
        ):
            yield

    def enqueue(self, target: str, count: int = 1) -> AbstractContextManager[None]:
        return self._enqueue(target, count)

    def stamp(self, payload: str) -> str:
        carrier: dict[str, str] = {}
        self._propagate.inject(carrier)
        parent = carrier.get("traceparent")
        if not parent or not payload.endswith("}"):
            return payload
        return f"{payload[:-1]},{json.dumps(TRACE_KEY)}:{json.dumps(parent)}}}"

    def _parent(self, job: JobEntity) -> Any:
        text = job.payload
        try:
            if self._codec is not None and self._codec.is_encrypted(job):
                text = self._codec.open_payload_text(job)
            document = json.loads(text)
            parent = document.get(TRACE_KEY) if isinstance(document, dict) else None
        except (ValueError, RatchetError):
            # unreadable or not openable here: the span starts a trace of its own (dispatch
            # reports the payload's problem itself)
            parent = None
        if not isinstance(parent, str):
            return None
        return self._propagate.extract({"traceparent": parent})

    @contextmanager
    def _span(self, job: JobEntity) -> Iterator[None]:
        with self._tracer.start_as_current_span(
            f"ratchet execute {job.target}",
            context=self._parent(job),
            kind=self._trace.SpanKind.CONSUMER,
            attributes={
                "ratchet.job.id": str(job.id),
                "ratchet.job.target": job.target,
                "ratchet.job.attempt": job.attempt,
            },
        ):
            yield

    def wrap(self, job: JobEntity, function: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def traced_async(*args: Any, **kwargs: Any) -> Any:
                with self._span(job):
                    return await function(*args, **kwargs)

            return traced_async

        @functools.wraps(function)
        def traced(*args: Any, **kwargs: Any) -> Any:
            with self._span(job):
                return function(*args, **kwargs)

        return traced


def tracing_from_config(settings: RatchetConfig, codec: PayloadCodec | None = None) -> Tracing:
    """The tracing selected by ``tracing.enabled``; ``ConfigurationError`` when it is on and
    OpenTelemetry is not installed. ``codec``: opens encrypted payloads (a worker's)."""
    if not settings.get(TRACING_ENABLED):
        return Tracing()
    try:
        return OpenTelemetryTracing(codec=codec)
    except ImportError as exc:
        raise ConfigurationError(
            "tracing.enabled",
            f"needs the OpenTelemetry API: pip install 'ratchet-core[otel]' ({exc})",
        ) from exc


__all__ = ["TRACE_KEY", "TRACING_ENABLED", "OpenTelemetryTracing", "Tracing", "tracing_from_config"]
