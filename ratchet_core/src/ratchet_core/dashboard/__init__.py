"""The Ratchet web dashboard: a WSGI application over a small JSON API.

``create_dashboard(container)`` builds it from a Ratchet container (its scheduler, store,
``PayloadMaskingPolicy`` and settings); serve it with ``ratchet dashboard --port 8080`` or mount
it in your application (see docs/dashboard.md). The front end is static files shipped in the
wheel.
"""

from __future__ import annotations

from typing import Any

from ratchet_core.dashboard.api import ApiError, DashboardApi
from ratchet_core.dashboard.asgi import asgi_dashboard
from ratchet_core.dashboard.wsgi import DASHBOARD_READ_ONLY, Authorize, Dashboard, Permission


def create_dashboard(
    container: Any,
    *,
    read_only: bool | None = None,
    authorize: Authorize | None = None,
    permission: Permission | None = None,
) -> Dashboard:
    """The dashboard of ``container`` (a Ratchet container, or an application container nesting
    one). ``read_only`` None reads ``dashboard.read_only``; ``authorize(environ)`` guards every
    request (401), ``permission(action, job_id, environ)`` every action (403)."""
    from ratchet_core.runtime.container import find_ratchet_container
    from ratchet_core.worker.settings import WORKER_NODE_TIMEOUT

    ratchet = find_ratchet_container(container)
    settings = ratchet.settings()
    api = DashboardApi(
        ratchet.scheduler(),
        ratchet.payload_masking_policy(),
        node_timeout=settings.get(WORKER_NODE_TIMEOUT),
    )
    return Dashboard(
        api,
        read_only=settings.get(DASHBOARD_READ_ONLY) if read_only is None else read_only,
        authorize=authorize,
        permission=permission,
    )


DJANGO_REQUEST_KEY = "ratchet.django_request"
"""Environ key under which :func:`django_view` passes the Django ``HttpRequest`` to the hooks."""


def django_view(dashboard: Dashboard) -> Any:
    """A Django view serving ``dashboard`` under the URL prefix it is routed at, e.g.
    ``re_path(r"^ratchet(?P<path>/.*)?$", staff_member_required(django_view(dash)))``."""
    from django.http import HttpResponse
    from django.views.decorators.csrf import csrf_exempt

    @csrf_exempt  # actions require the X-Ratchet-Dashboard header instead
    def view(request: Any, path: str | None = None) -> Any:
        environ = dict(request.META)
        environ[DJANGO_REQUEST_KEY] = request  # for authorize/permission hooks
        environ["PATH_INFO"] = path or ""
        environ["SCRIPT_NAME"] = request.path[: len(request.path) - len(path or "")]
        captured: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]]) -> None:
            captured["status"] = int(status.split(maxsplit=1)[0])
            captured["headers"] = headers

        body = b"".join(dashboard(environ, start_response))
        response = HttpResponse(body, status=captured["status"])
        for name, value in captured["headers"]:
            response[name] = value
        return response

    return view


__all__ = [
    "DJANGO_REQUEST_KEY",
    "ApiError",
    "Dashboard",
    "DashboardApi",
    "asgi_dashboard",
    "create_dashboard",
    "django_view",
]
