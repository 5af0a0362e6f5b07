"""``ratchet dashboard``: serve the web dashboard (a threaded stdlib WSGI server)."""

from __future__ import annotations

import socketserver
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import click

from ratchet_core.cli import get_container
from ratchet_core.cli.db import apply_url, ratchet_errors, url_option


class ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    """One thread per request, so a slow query does not block the page's other requests."""

    daemon_threads = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@click.command("dashboard")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--read-only", is_flag=True, default=None, help="Refuse every action.")
@click.option("--access-log", is_flag=True, help="Log every request to stderr.")
@url_option
def dashboard(
    host: str, port: int, read_only: bool | None, access_log: bool, store_url: str | None
) -> None:
    """Serve the web dashboard (overview, jobs, nodes, actions) until interrupted.

    It has no login of its own: listen on 127.0.0.1 (the default), or mount it in your
    application behind its authentication (docs/dashboard.md)."""
    from ratchet_core.dashboard import create_dashboard

    apply_url(store_url)
    with ratchet_errors():
        app = create_dashboard(get_container(), read_only=read_only)
    server = make_server(
        host,
        port,
        app,
        server_class=ThreadingWSGIServer,
        handler_class=WSGIRequestHandler if access_log else QuietHandler,
    )
    bound = server.server_address[1]
    mode = " (read-only)" if app.read_only else ""
    click.echo(f"Ratchet dashboard on http://{host}:{bound}/{mode}  (Ctrl+C to stop)", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def register(group: click.Group) -> None:
    group.add_command(dashboard)
