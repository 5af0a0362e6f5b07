"""The dashboard's JSON API over HTTP (a real threaded server) on every store: overview counts
and rates, the job list with filters and search, job detail with masked arguments, executions,
actions with their refusals, the read-only setting and the security hooks, nodes, health. Also
on PostgreSQL through PgBouncer in transaction pooling mode."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from ratchet_api.model import JobStatus
from ratchet_api.store.entities import NodeEntity
from tests.conftest import ALL_BACKENDS, PGBOUNCER, backend_url
from tests.dashboard.server import ACTION, Scene, call, dashboard_of, make_scene, serve


@pytest.fixture(params=[*ALL_BACKENDS, PGBOUNCER])
def store_url(request: pytest.FixtureRequest) -> str:
    """Every store, and PostgreSQL through a transaction-pooling PgBouncer."""
    return backend_url(request, request.param)


@pytest.fixture
def scene(store_url: str) -> Iterator[Scene]:
    scene = make_scene(store_url)
    yield scene
    scene.container.shutdown_resources()
    scene.store.close()


@pytest.fixture
def base(scene: Scene) -> Iterator[str]:
    with serve(dashboard_of(scene)) as url:
        yield url


def test_overview_counts_and_rates(scene: Scene, base: str) -> None:
    status, data = call(base, "api/overview")
    assert status == 200 and data["available"]
    assert data["counts"]["SUCCEEDED"] >= 4  # three adds and the echo
    assert data["counts"]["FAILED"] >= 1
    assert data["finished"]["FAILED"] >= 1
    assert 0 < data["failure_rate"] < 1
    assert data["throughput_per_minute"] > 0
    assert len(data["series"]) == 12
    assert sum(p["SUCCEEDED"] for p in data["series"]) == data["finished"]["SUCCEEDED"]
    assert data["queue_wait_seconds"]["p50"] is not None
    assert data["execution_seconds"]["p95"] is not None
    assert call(base, "api/overview?window=5")[0] == 400


def test_job_list_filters_search_and_paging(scene: Scene, base: str) -> None:
    status, data = call(base, f"api/jobs?tag={scene.tag}")
    assert status == 200 and data["total"] == 5
    _, failed = call(base, f"api/jobs?tag={scene.tag}&status=failed")
    assert [j["id"] for j in failed["jobs"]] == [str(scene.dead_id)]
    assert failed["jobs"][0]["last_error"].startswith("ConnectionError")
    _, by_target = call(base, f"api/jobs?tag={scene.tag}&target=tests.engine.targets:add")
    assert by_target["total"] == 3
    _, page = call(base, f"api/jobs?tag={scene.tag}&limit=2&offset=4")
    assert page["total"] == 5 and len(page["jobs"]) == 1
    _, found = call(base, f"api/jobs?q={scene.secret_id}")
    assert [j["id"] for j in found["jobs"]] == [str(scene.secret_id)]
    assert call(base, "api/jobs?q=nope")[1]["total"] == 0  # searched as text: no match
    assert call(base, "api/jobs?status=LATE")[0] == 400
    assert call(base, "api/jobs?limit=0")[0] == 400


def test_job_detail_masks_secrets_and_shows_executions(scene: Scene, base: str) -> None:
    status, job = call(base, f"api/jobs/{scene.secret_id}")
    assert status == 200
    assert job["status"] == "SUCCEEDED"
    assert job["args"] == [{"user": "ada", "password": "••••••", "card": {"cvv": "••••••"}}]
    assert "hunter2" not in str(job)
    assert job["result"] == {"user": "ada", "password": "••••••", "card": {"cvv": "••••••"}}
    _, dead = call(base, f"api/jobs/{scene.dead_id}")
    assert dead["status"] == "FAILED" and "transient failure" in dead["last_error"]
    audit = [e["status"] for e in dead["executions"]]
    assert audit == ["FAILED"]
    assert call(base, "api/jobs/0190a0a0-0000-7000-8000-000000000000")[0] == 404
    assert call(base, "api/jobs/not-an-id")[0] == 400


def test_actions_change_the_job_and_refusals_say_why(scene: Scene, base: str) -> None:
    no_header = call(base, f"api/jobs/{scene.dead_id}/retry", method="POST")
    assert no_header[0] == 400 and "X-Ratchet-Dashboard" in no_header[1]["error"]
    status, done = call(base, f"api/jobs/{scene.dead_id}/retry", method="POST", headers=ACTION)
    assert status == 200 and done["status"] == "PENDING"
    again = call(base, f"api/jobs/{scene.dead_id}/retry", method="POST", headers=ACTION)
    assert again[0] == 409 and "PENDING" in again[1]["error"]
    assert call(base, f"api/jobs/{scene.dead_id}/pause", method="POST", headers=ACTION)[0] == 200
    job = scene.store.find_by_id(scene.dead_id)
    assert job is not None and job.status is JobStatus.PAUSED
    assert call(base, f"api/jobs/{scene.dead_id}/resume", method="POST", headers=ACTION)[0] == 200
    assert call(base, f"api/jobs/{scene.dead_id}/cancel", method="POST", headers=ACTION)[0] == 200
    assert call(base, f"api/jobs/{scene.dead_id}/delete", method="POST", headers=ACTION)[0] == 200
    assert scene.store.find_by_id(scene.dead_id) is None
    assert call(base, f"api/jobs/{scene.dead_id}/explode", method="POST", headers=ACTION)[0] == 404


def test_read_only_setting_and_permission_hook_refuse_actions(scene: Scene) -> None:
    with serve(dashboard_of(scene, read_only=True)) as url:
        assert call(url, "api/config")[1] == {"read_only": True}
        refused = call(url, f"api/jobs/{scene.dead_id}/retry", method="POST", headers=ACTION)
        assert refused[0] == 403 and "read-only" in refused[1]["error"]
    asked: list[tuple[str, str]] = []

    def only_cancel(action: str, job_id: str, environ: dict[str, Any]) -> bool:
        asked.append((action, job_id))
        return action == "cancel"

    with serve(dashboard_of(scene, permission=only_cancel)) as url:
        denied = call(url, f"api/jobs/{scene.dead_id}/retry", method="POST", headers=ACTION)
        assert denied[0] == 403
        assert asked == [("retry", str(scene.dead_id))]
    job = scene.store.find_by_id(scene.dead_id)
    assert job is not None and job.status is JobStatus.FAILED


def test_authorize_hook_guards_every_route(scene: Scene) -> None:
    def token(environ: dict[str, Any]) -> bool:
        return bool(environ.get("HTTP_AUTHORIZATION") == "Bearer s3cret")

    with serve(dashboard_of(scene, authorize=token)) as url:
        assert call(url, "api/overview")[0] == 401
        assert call(url, "api/overview", headers={"Authorization": "Bearer s3cret"})[0] == 200


def test_nodes_health_static_files_and_unknown_routes(scene: Scene, base: str) -> None:
    # a worker that stops cleanly removes its node row: a live node is one heartbeating now
    scene.store.upsert_heartbeat(NodeEntity(node_id=f"dash-live-{id(scene)}", host="h", pid=1))
    _, nodes = call(base, "api/nodes")
    assert nodes["nodes"], "the heartbeating node is listed"
    assert {"node_id", "last_heartbeat", "alive", "heartbeat_age_seconds"} <= set(nodes["nodes"][0])
    status, health = call(base, "healthz")
    assert status == 200 and health["status"] == "ok"
    with urllib.request.urlopen(base, timeout=10) as page:
        html = page.read().decode()
    assert "dashboard.js" in html and "http" not in html.split("<body>")[1].split("</body>")[0]
    with urllib.request.urlopen(base + "dashboard.js", timeout=10) as script:
        assert script.headers["Content-Type"].startswith("text/javascript")
    assert call(base, "api/nothing")[0] == 404
    assert call(base, "api/jobs", method="DELETE")[0] == 405


def test_prometheus_metrics_endpoint(scene: Scene, base: str) -> None:
    with urllib.request.urlopen(base + "metrics", timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = answer.read().decode()
    assert "# TYPE ratchet_jobs gauge" in text
    failed = [
        line for line in text.splitlines() if line.startswith('ratchet_jobs{status="FAILED"}')
    ]
    assert len(failed) == 1 and float(failed[0].split()[1]) >= 1
    assert 'ratchet_nodes{state="alive"}' in text
    assert 'ratchet_queue_wait_seconds{quantile="0.5"}' in text
