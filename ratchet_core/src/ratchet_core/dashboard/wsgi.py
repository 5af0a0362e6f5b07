"""The dashboard as a WSGI application: the JSON API under ``api/``, ``healthz``, ``metrics``
(Prometheus text), and the static
front end (``static/``, shipped in the wheel; nothing is fetched at run time).

Mount it anywhere (the front end uses relative URLs): ``ratchet dashboard`` serves it, a Flask
app mounts it with werkzeug's ``DispatcherMiddleware``, FastAPI/Starlette with
``WSGIMiddleware``, Django through :func:`ratchet_core.dashboard.django_view`.

Security hooks: ``authorize(environ) -> bool`` guards every request (401 when false: put your
application's own authentication there, or mount the dashboard behind it); ``permission(action,
job_id, environ) -> bool`` guards each action (403 when false). ``read_only`` (setting
``dashboard.read_only``) refuses every action. Actions are POST requests that must carry the
header ``X-Ratchet-Dashboard: 1`` (a cross-site form cannot set it).
"""

from __future__ import annotations

import json
import logging
import mimetypes
from collections.abc import Callable, Iterable
from datetime import timedelta
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl

from ratchet_api.spi.runtime import RatchetConfigKey
from ratchet_core.dashboard.api import ApiError, DashboardApi
from ratchet_core.dashboard.operator import OperatorApi
from ratchet_core.runtime.config import parse_bool, register_key

_log = logging.getLogger("ratchet.dashboard")

DASHBOARD_READ_ONLY = register_key(
    RatchetConfigKey(
        "dashboard.read_only",
        parse_bool,
        False,
        "The dashboard only shows: retry, cancel, pause, resume and delete are refused (403).",
    )
)

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
Authorize = Callable[[Environ], bool]
Permission = Callable[[str, str, Environ], bool]
ACTION_HEADER = "HTTP_X_RATCHET_DASHBOARD"
STATIC_FILES = ("index.html", "dashboard.js", "operator.js", "dashboard.css")


def _static(name: str) -> bytes:
    return resources.files("ratchet_core.dashboard").joinpath("static", name).read_bytes()


class Dashboard:
    """The WSGI application. Thread safe."""

    def __init__(
        self,
        api: DashboardApi,
        *,
        read_only: bool = False,
        authorize: Authorize | None = None,
        permission: Permission | None = None,
    ) -> None:
        self.api = api
        self.operator = OperatorApi(api)
        self.read_only = read_only
        self._authorize = authorize
        self._permission = permission

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD", "GET").upper()
        try:
            if self._authorize is not None and not self._authorize(environ):
                raise ApiError(401, "not authorized to use the Ratchet dashboard")
            if path == "/metrics":
                return self._text(start_response, self.api.prometheus())
            if path.startswith("/api/") or path == "/healthz":
                status, body = self._api(method, path, environ)
                return self._json(start_response, status, body)
            return self._file(environ, start_response, path)
        except ApiError as exc:
            return self._json(start_response, exc.status, {"error": exc.message})
        except Exception as exc:  # noqa: BLE001 - an answer, not a dropped connection
            _log.exception("dashboard request %s %s failed", method, path)
            return self._json(start_response, 500, {"error": f"{type(exc).__name__}: {exc}"})

    # ------------------------------------------------------------ routing

    def _api(self, method: str, path: str, environ: Environ) -> tuple[int, Any]:
        params = dict(parse_qsl(environ.get("QUERY_STRING", "")))
        parts = [p for p in path.split("/") if p]
        if parts == ["healthz"]:
            ok, report = self.api.health()
            return (200 if ok else 503), report
        parts = parts[1:]  # after "api"
        if method == "POST":
            return 200, self._post(parts, path, environ)
        if method != "GET":
            raise ApiError(405, f"{method} is not allowed")
        operator = self.operator
        if parts == ["jobs"] and params.get("q", "").strip():
            return 200, operator.search(params["q"])
        if len(parts) == 3 and parts[0] == "jobs" and parts[2] == "workflow":
            return 200, operator.workflow(parts[1])
        if parts == ["batches"]:
            return 200, operator.batches(params)
        if len(parts) == 2 and parts[0] == "batches":
            return 200, operator.batch(parts[1], params)
        if parts == ["signals"]:
            return 200, operator.signals(params)
        if parts == ["queues"]:
            return 200, operator.queues(params)
        if len(parts) == 2 and parts[0] == "recurring":
            return 200, operator.schedule(parts[1])
        if parts == ["overview"]:
            window = self._window(params.get("window"))
            return 200, self.api.overview(window)
        if parts == ["jobs"]:
            return 200, self.api.jobs(params)
        if len(parts) == 2 and parts[0] == "jobs":
            return 200, self.api.job(parts[1])
        if parts == ["nodes"]:
            return 200, self.api.nodes()
        if parts == ["recurring"]:
            return 200, self.api.recurring()
        if parts == ["config"]:
            return 200, {"read_only": self.read_only}
        raise ApiError(404, f"no route {path}")

    def _post(self, parts: list[str], path: str, environ: Environ) -> Any:
        if environ.get(ACTION_HEADER) != "1":
            raise ApiError(400, "actions need the header X-Ratchet-Dashboard: 1")
        if len(parts) == 3 and parts[0] == "jobs":
            return self._act(parts[1], parts[2], environ)
        if parts == ["bulk"]:
            return self._bulk(_body(environ), environ)
        if parts == ["signals"]:
            body = _body(environ)
            target = self.operator.signal_target(body)
            self._allow("signal", str(target), environ)
            answer = self.operator.send_signal(target, body.get("payload"))
            _log.info(
                "dashboard: %s sent a signal to %s: %s", actor(environ), target, answer["outcome"]
            )
            return answer
        if len(parts) == 3 and parts[0] == "recurring":
            name, action = parts[1], parts[2]
            self._allow(f"schedule.{action}", name, environ)
            answer = self.operator.schedule_action(name, action)
            _log.info("dashboard: %s did %s of schedule %s", actor(environ), action, name)
            return answer
        raise ApiError(404, f"no POST route {path}")

    def _allow(self, action: str, subject: str, environ: Environ) -> None:
        """Refuse (403) in read-only mode or when the ``permission`` hook says no."""
        if self.read_only:
            raise ApiError(403, "the dashboard is read-only (dashboard.read_only)")
        if self._permission is not None and not self._permission(action, subject, environ):
            _log.warning(
                "dashboard: %s was refused %s of %s", actor(environ), action, subject or "-"
            )
            raise ApiError(403, f"not permitted to {action} {subject}")

    def _act(self, job_id: str, action: str, environ: Environ) -> Any:
        self._allow(action, job_id, environ)
        answer = self.api.act(job_id, action)
        _log.info("dashboard: %s did %s of job %s", actor(environ), action, job_id)
        return answer

    def _bulk(self, body: dict[str, Any], environ: Environ) -> Any:
        """A bulk action: counted with ``"dry_run": true`` (no permission needed to count),
        applied otherwise. The ``permission`` hook is asked with the action and each selected
        job id, or ``"*"`` for every job matching a filter; one refusal refuses it all."""
        action, ids, query = self.operator.bulk_selection(body)
        if body.get("dry_run"):
            count = len(ids) if ids is not None else self.operator.bulk_count(query)
            return {"action": action, "selected": count, "dry_run": True}
        for subject in [str(i) for i in ids] if ids is not None else ["*"]:
            self._allow(action, subject, environ)
        answer = self.operator.bulk(action, ids, query, body.get("confirm"))
        selection = (
            f"{len(ids)} selected jobs"
            if ids is not None
            else "the jobs matching "
            + json.dumps({k: v for k, v in (body.get("filter") or {}).items() if v})
        )
        _log.info(
            "dashboard: %s did bulk %s of %s: %d changed, %d skipped, %d missing",
            actor(environ),
            action,
            selection,
            answer["changed"],
            answer["skipped"],
            answer["missing"],
        )
        return answer

    @staticmethod
    def _window(raw: str | None) -> timedelta:
        if not raw:
            return timedelta(hours=1)
        try:
            seconds = float(raw)
        except ValueError:
            raise ApiError(400, f"window must be seconds, got {raw!r}") from None
        if not 60 <= seconds <= 31 * 86400:
            raise ApiError(400, f"window must be between 60 and {31 * 86400} seconds")
        return timedelta(seconds=seconds)

    # ------------------------------------------------------------ answers

    @staticmethod
    def _json(start_response: StartResponse, status: int, body: Any) -> list[bytes]:
        data = json.dumps(body).encode()
        start_response(
            f"{status} {_REASONS.get(status, 'Error')}",
            [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(data))),
                ("Cache-Control", "no-store"),
            ],
        )
        return [data]

    @staticmethod
    def _text(start_response: StartResponse, text: str) -> list[bytes]:
        data = text.encode()
        start_response(
            "200 OK",
            [
                ("Content-Type", "text/plain; version=0.0.4; charset=utf-8"),
                ("Content-Length", str(len(data))),
            ],
        )
        return [data]

    @staticmethod
    def _file(environ: Environ, start_response: StartResponse, path: str) -> list[bytes]:
        name = path.strip("/") or "index.html"
        if name.startswith("static/"):
            name = name.removeprefix("static/")
        if name not in STATIC_FILES:
            raise ApiError(404, f"no page {path}")
        if name == "index.html" and not path.endswith("/"):
            # relative URLs of the page need the trailing slash
            location = environ.get("SCRIPT_NAME", "") + path + "/"
            start_response("301 Moved Permanently", [("Location", location)])
            return [b""]
        data = _static(name)
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        start_response(
            "200 OK",
            [
                ("Content-Type", f"{kind}; charset=utf-8"),
                ("Content-Length", str(len(data))),
                ("X-Content-Type-Options", "nosniff"),
                ("Content-Security-Policy", "default-src 'self'; img-src 'self' data:"),
            ],
        )
        return [data]


USER_KEY = "ratchet.user"
"""Environ key an ``authorize`` hook may set to the operator's name: actions are logged with
it (else ``REMOTE_USER``, else the Django request's user, else ``anonymous``)."""
MAX_BODY = 1 << 20


def actor(environ: Environ) -> str:
    """Who sends the request, for the action log."""
    for key in (USER_KEY, "REMOTE_USER"):
        value = environ.get(key)
        if value:
            return str(value)
    request = environ.get("ratchet.django_request")
    user = getattr(request, "user", None)
    name = getattr(user, "get_username", None)
    if callable(name) and getattr(user, "is_authenticated", False):
        return str(name())
    return "anonymous"


def _body(environ: Environ) -> dict[str, Any]:
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise ApiError(400, "bad Content-Length") from None
    if length > MAX_BODY:
        raise ApiError(400, f"the request body is over {MAX_BODY} bytes")
    raw = environ["wsgi.input"].read(length) if length else b""
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        raise ApiError(400, "the request body is not JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


__all__ = ["DASHBOARD_READ_ONLY", "USER_KEY", "Dashboard", "actor"]
