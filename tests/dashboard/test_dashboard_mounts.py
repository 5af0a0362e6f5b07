"""The dashboard mounted as docs/dashboard.md shows: in Flask (werkzeug's dispatcher), FastAPI
(``asgi_dashboard``) and Django (``django_view`` behind the app's own decorator), each through
the framework's own test client, with the application's authentication in front."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ratchet_core.dashboard import asgi_dashboard, django_view
from tests.dashboard.server import ACTION, Scene, dashboard_of, make_scene


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    url = f"sqlite:///{tmp_path_factory.mktemp('mounts') / 'ratchet.db'}"
    scene = make_scene(url)
    yield scene
    scene.container.shutdown_resources()
    scene.store.close()


def admin(environ: dict[str, Any]) -> bool:
    return "admin=yes" in environ.get("HTTP_COOKIE", "")


def test_flask_dispatcher_mount(scene: Scene) -> None:
    from flask import Flask
    from werkzeug.middleware.dispatcher import DispatcherMiddleware

    app = Flask("host")
    app.wsgi_app = DispatcherMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, {"/ratchet": dashboard_of(scene, authorize=admin)}
    )
    client = app.test_client()
    assert client.get("/ratchet/api/overview").status_code == 401
    client.set_cookie("admin", "yes")
    page = client.get("/ratchet/")
    assert page.status_code == 200 and b"dashboard.js" in page.data
    assert client.get("/ratchet").status_code == 301
    data = client.get(f"/ratchet/api/jobs/{scene.dead_id}").get_json()
    assert data["status"] == "FAILED"


def test_fastapi_asgi_mount(scene: Scene) -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    app = FastAPI()
    app.mount("/ops/ratchet", asgi_dashboard(dashboard_of(scene, authorize=admin)))
    with TestClient(app) as client:
        assert client.get("/ops/ratchet/api/overview").status_code == 401
        client.cookies.set("admin", "yes")
        overview = client.get("/ops/ratchet/api/overview")
        assert overview.status_code == 200 and overview.json()["counts"]["FAILED"] >= 1
        assert client.get("/ops/ratchet/").text.count("dashboard.js") == 1
        refused = client.post(f"/ops/ratchet/api/jobs/{scene.secret_id}/retry", headers=ACTION)
        assert refused.status_code == 409


def test_django_view_behind_the_apps_decorator(scene: Scene) -> None:
    from django.conf import settings
    from django.http import HttpResponseForbidden
    from django.test import RequestFactory

    if not settings.configured:
        settings.configure(DEBUG=True, ALLOWED_HOSTS=["*"], USE_TZ=True)

    def staff_only(view: Any) -> Any:
        def guarded(request: Any, **kwargs: Any) -> Any:
            if request.COOKIES.get("admin") != "yes":
                return HttpResponseForbidden("staff only")
            return view(request, **kwargs)

        return guarded

    view = staff_only(django_view(dashboard_of(scene)))
    factory = RequestFactory()
    assert view(factory.get("/ratchet/api/overview"), path="/api/overview").status_code == 403
    request = factory.get("/ratchet/api/jobs", {"status": "FAILED"})
    request.COOKIES["admin"] = "yes"
    answer = view(request, path="/api/jobs")
    assert answer.status_code == 200 and str(scene.dead_id) in answer.content.decode()
    page = factory.get("/ratchet/")
    page.COOKIES["admin"] = "yes"
    html = view(page, path="/")
    assert html.status_code == 200 and b"dashboard.js" in html.content
