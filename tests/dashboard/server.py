"""A real dashboard server for the tests: a Ratchet container on a store, a few jobs run by a
real worker (some succeed, one is dead-lettered), and the dashboard served over HTTP by the same
threaded WSGI server ``ratchet dashboard`` uses, on a free port."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID
from wsgiref.simple_server import make_server

import attrs

from ratchet_api.store.protocols import JobStore
from ratchet_core.cli.dashboard import QuietHandler, ThreadingWSGIServer
from ratchet_core.dashboard import Dashboard, create_dashboard
from tests.engine import targets
from tests.engine.conftest import build_container, migrate
from tests.engine.worker_fixtures import fast_settings


@attrs.define
class Scene:
    container: Any
    store: JobStore
    tag: str
    ok_ids: list[UUID]
    dead_id: UUID
    secret_id: UUID
    flaky_key: str

    def run_worker(self) -> None:
        worker = self.container.worker(worker_settings=fast_settings())
        try:
            worker.run_until_idle(30)
        finally:
            worker.stop(timeout=5)


def make_scene(store_url: str) -> Scene:
    container = build_container(store_url)
    store: JobStore = container.job_store()
    migrate(store)
    scheduler = container.scheduler()
    tag = f"dash-{uuid.uuid4().hex[:10]}"
    key = f"dash-flaky-{uuid.uuid4().hex}"
    ok_ids = [scheduler.job(targets.add).args(i, 1).tags(tag).enqueue() for i in range(3)]
    dead_id = scheduler.job(targets.flaky).args(key, 1).max_retries(0).tags(tag).enqueue()
    secret_id = (
        scheduler.job(targets.echo_any)
        .args({"user": "ada", "password": "hunter2", "card": {"cvv": "123"}})
        .tags(tag, "secret")
        .enqueue()
    )
    scene = Scene(container, store, tag, ok_ids, dead_id, secret_id, key)
    # A loaded machine may see one run_until_idle end before every job ran: run until the
    # scene's jobs are finished (three minutes at most: the Python Mongo test server under a
    # loaded CI machine took more than one, 2026-12-04).
    deadline = time.monotonic() + 180
    while True:
        scene.run_worker()
        jobs = [store.find_by_id(i) for i in (*ok_ids, dead_id, secret_id)]
        if all(j is not None and j.finished_at is not None for j in jobs):
            return scene
        assert time.monotonic() < deadline, "the scene's jobs did not finish within 180 s"


@contextmanager
def serve(app: Dashboard) -> Iterator[str]:
    server = make_server(
        "127.0.0.1", 0, app, server_class=ThreadingWSGIServer, handler_class=QuietHandler
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def dashboard_of(scene: Scene, **kwargs: Any) -> Dashboard:
    return create_dashboard(scene.container, **kwargs)


def call(
    base: str, path: str, *, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    request = urllib.request.Request(base + path, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


ACTION = {"X-Ratchet-Dashboard": "1"}
