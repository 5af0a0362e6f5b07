"""``ratchet metrics serve``: the Prometheus exposition of the store's queue gauges (extra
``ratchet-core[prometheus]``), for Prometheus and autoscalers (KEDA's Prometheus scaler)."""

from __future__ import annotations

from wsgiref.simple_server import WSGIRequestHandler, make_server

import click

from ratchet_core.cli import get_container
from ratchet_core.cli.dashboard import QuietHandler, ThreadingWSGIServer
from ratchet_core.cli.db import apply_url, ratchet_errors, url_option


@click.group("metrics")
def metrics() -> None:
    """Prometheus metrics of the store (queue depth, oldest due job, running, nodes)."""


@metrics.command("serve")
@click.option("--host", default="0.0.0.0", show_default=True, help="Interface to listen on.")
@click.option(
    "--port",
    default=9464,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to listen on (0: any free port, printed at start).",
)
@click.option(
    "--cache-seconds",
    type=click.FloatRange(0.0, 3600.0),
    default=None,
    help="Reuse one store read for this long (default: metrics.prometheus.cache_seconds, 5).",
)
@click.option("--access-log", is_flag=True, help="Log every request to stderr.")
@url_option
def serve(
    host: str, port: int, cache_seconds: float | None, access_log: bool, store_url: str | None
) -> None:
    """Serve /metrics in the Prometheus text format until interrupted: due jobs per execution
    target and priority band, the oldest due job's age, running jobs, recent finished jobs
    and worker nodes, read from the store when scraped (cached briefly)."""
    try:
        from ratchet_core.observability.prometheus import store_registry
    except ImportError as exc:
        raise click.ClickException(
            f"ratchet metrics needs prometheus-client: pip install 'ratchet-core[prometheus]' "
            f"({exc})"
        ) from exc
    from datetime import timedelta

    from prometheus_client import make_wsgi_app

    from ratchet_core.observability.metrics import PROMETHEUS_CACHE, PROMETHEUS_WINDOW
    from ratchet_core.worker.settings import WORKER_NODE_TIMEOUT

    apply_url(store_url)
    with ratchet_errors():
        container = get_container()
        settings = container.settings()
        registry = store_registry(
            container.job_store(),
            node_timeout=settings.get(WORKER_NODE_TIMEOUT),
            cache_seconds=(
                cache_seconds if cache_seconds is not None else settings.get(PROMETHEUS_CACHE)
            ),
            window=timedelta(seconds=settings.get(PROMETHEUS_WINDOW)),
        )
    server = make_server(
        host,
        port,
        make_wsgi_app(registry),
        server_class=ThreadingWSGIServer,
        handler_class=WSGIRequestHandler if access_log else QuietHandler,
    )
    bound = server.server_address[1]
    click.echo(f"Ratchet metrics on http://{host}:{bound}/metrics  (Ctrl+C to stop)", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def register(group: click.Group) -> None:
    group.add_command(metrics)
