"""The dashboard as an ASGI application, for FastAPI/Starlette (``app.mount("/ratchet",
asgi_dashboard(dashboard))``): each HTTP request runs the WSGI dashboard in a worker thread
(its answers are small and built in memory; it reads no request body)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ratchet_core.dashboard.wsgi import Dashboard

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def _environ(scope: Scope) -> dict[str, Any]:
    root = scope.get("root_path", "")
    path = scope.get("path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    server = scope.get("server") or ("localhost", 80)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope.get("method", "GET"),
        "SCRIPT_NAME": root,
        "PATH_INFO": path,
        "QUERY_STRING": scope.get("query_string", b"").decode("latin-1"),
        "SERVER_NAME": str(server[0]),
        "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
        "wsgi.url_scheme": scope.get("scheme", "http"),
    }
    for raw_name, raw_value in scope.get("headers", []):
        name = raw_name.decode("latin-1").upper().replace("-", "_")
        value = raw_value.decode("latin-1")
        if name in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            environ[name] = value
        else:
            environ[f"HTTP_{name}"] = value
    return environ


def asgi_dashboard(dashboard: Dashboard) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """An ASGI application serving ``dashboard`` (HTTP only)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        environ = _environ(scope)
        captured: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]]) -> None:
            captured["status"] = int(status.split(maxsplit=1)[0])
            captured["headers"] = headers

        def call() -> bytes:
            return b"".join(dashboard(environ, start_response))

        body = await asyncio.to_thread(call)
        await send(
            {
                "type": "http.response.start",
                "status": captured["status"],
                "headers": [(k.lower().encode(), v.encode()) for k, v in captured["headers"]],
            }
        )
        await send({"type": "http.response.body", "body": body})

    return app


__all__ = ["asgi_dashboard"]
