"""The operator API of the dashboard (issue 28) over HTTP on every store: bulk actions over a
selection or a filter (count, confirmation, the ``permission`` hook, the log naming who did
it), batches with progress, callbacks and children, a ``then`` + ``branch`` workflow as a graph,
jobs awaiting a signal and sending one, queues and targets, schedule actions and firings, and
search by id, idempotency key, tag, target, error text and (masked) argument values."""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest

from ratchet_api.ids import uuid7
from ratchet_api.model import JobStatus
from ratchet_api.workflow import Step, equals
from ratchet_core.dashboard.wsgi import USER_KEY
from tests.conftest import ALL_BACKENDS, backend_url
from tests.dashboard.server import ACTION, Scene, call, dashboard_of, make_scene, serve
from tests.engine import targets
from tests.engine import workflow_targets as wt
from tests.engine.batch_targets import callback, child


@pytest.fixture(params=ALL_BACKENDS)
def scene(request: pytest.FixtureRequest) -> Iterator[Scene]:
    scene = make_scene(backend_url(request, request.param))
    yield scene
    scene.container.shutdown_resources()
    scene.store.close()


@pytest.fixture
def base(scene: Scene) -> Iterator[str]:
    with serve(dashboard_of(scene)) as url:
        yield url


def post(base: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(
        base + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={**ACTION, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def failed_jobs(scene: Scene, count: int, tag: str) -> list[uuid.UUID]:
    """``count`` dead-lettered jobs written as the store keeps them (copies of one of the
    scene's finished jobs, FAILED, each with its own id and ``tag``)."""
    done = scene.store.find_by_id(scene.ok_ids[0])
    assert done is not None
    now = scene.store.server_now()
    jobs = [
        attrs.evolve(
            done,
            id=uuid7(),
            status=JobStatus.FAILED,
            owner=None,
            started_at=now,
            finished_at=now,
            result=None,
            last_error="ConnectionError: the bulk test's failure",
            tags=frozenset({tag}),
            idempotency_key=None,
        )
        for _ in range(count)
    ]
    scene.store.bulk_insert(jobs)
    return [j.id for j in jobs]


def run_until(scene: Scene, what: str, condition: Callable[[], bool]) -> None:
    """Run the scene's worker until ``condition`` holds (a loaded machine may need more than
    one ``run_until_idle``); fail after a minute."""
    deadline = time.monotonic() + 60
    while True:
        scene.run_worker()
        if condition():
            return
        assert time.monotonic() < deadline, f"{what}: not within 60 s"


def test_bulk_retry_of_a_filter_counts_confirms_and_logs_who(
    scene: Scene, caplog: pytest.LogCaptureFixture
) -> None:
    tag = f"bulk-{uuid.uuid4().hex[:8]}"
    ids = failed_jobs(scene, 500, tag)
    asked: list[tuple[str, str]] = []

    def who(environ: dict[str, Any]) -> bool:
        environ[USER_KEY] = "ops-ann"
        return True

    def allow(action: str, subject: str, environ: dict[str, Any]) -> bool:
        asked.append((action, subject))
        return True

    selection = {"action": "retry", "filter": {"status": "FAILED", "tag": tag}}
    with serve(dashboard_of(scene, authorize=who, permission=allow)) as url:
        status, counted = post(url, "api/bulk", {**selection, "dry_run": True})
        assert status == 200 and counted["selected"] == 500
        wrong = post(url, "api/bulk", {**selection, "confirm": 499})
        assert wrong[0] == 409 and "500" in wrong[1]["error"]
        assert asked == [("retry", "*")]
        with caplog.at_level(logging.INFO, logger="ratchet.dashboard"):
            status, done = post(url, "api/bulk", {**selection, "confirm": 500})
    assert status == 200, done
    assert (done["selected"], done["changed"], done["skipped"]) == (500, 500, 0)
    retried = [scene.store.find_by_id(i) for i in ids[::50]]
    assert all(j is not None and j.status is JobStatus.PENDING for j in retried)
    logged = [r.getMessage() for r in caplog.records if r.name == "ratchet.dashboard"]
    assert any("ops-ann did bulk retry" in m and "500 changed" in m for m in logged), logged


def test_the_permission_hook_refuses_a_bulk_action_and_nothing_changes(scene: Scene) -> None:
    tag = f"deny-{uuid.uuid4().hex[:8]}"
    ids = failed_jobs(scene, 3, tag)

    def no_deletes(action: str, subject: str, environ: dict[str, Any]) -> bool:
        return action != "delete"

    with serve(dashboard_of(scene, permission=no_deletes)) as url:
        refused = post(url, "api/bulk", {"action": "delete", "ids": [str(i) for i in ids]})
        assert refused[0] == 403 and "delete" in refused[1]["error"]
        assert all(scene.store.find_by_id(i) is not None for i in ids)
        status, paused = post(url, "api/bulk", {"action": "pause", "ids": [str(ids[0])]})
        assert status == 200 and paused["skipped"] == 1  # a FAILED job cannot be paused
        status, cancelled = post(
            url, "api/bulk", {"action": "cancel", "ids": [str(scene.ok_ids[0]), str(ids[0])]}
        )
        assert status == 200 and (cancelled["changed"], cancelled["skipped"]) == (0, 2)
    with serve(dashboard_of(scene, read_only=True)) as url:
        assert post(url, "api/bulk", {"action": "retry", "ids": [str(ids[0])]})[0] == 403
    with serve(dashboard_of(scene)) as url:
        assert post(url, "api/bulk", {"action": "explode", "ids": [str(ids[0])]})[0] == 400
        both = {"action": "retry", "ids": [str(ids[0])], "filter": {"tag": tag}}
        assert post(url, "api/bulk", both)[0] == 400
        assert post(url, "api/bulk", {"action": "retry", "ids": ["nope"]})[0] == 400


def test_a_batch_shows_progress_callbacks_and_children(scene: Scene, tmp_path: Any) -> None:
    log = str(tmp_path / "calls.log")
    batch = scene.container.scheduler().batch("dash-batch")
    batch.add_many(child, [(log, i) for i in range(4)])
    batch.on_complete(callback, log, "complete")
    batch_id = batch.enqueue()
    with serve(dashboard_of(scene)) as url:
        status, before = call(url, f"api/batches/{batch_id}")
        assert status == 200
        assert (before["total"], before["succeeded"], before["pending"]) == (4, 0, 4)
        assert before["children"]["total"] == 4 and before["percent"] == 0.0
        assert [c["status"] for c in before["callbacks"]] == ["WAITING"]
        run_until(
            scene, "the batch", lambda: call(url, f"api/batches/{batch_id}")[1]["pending"] == 0
        )
        _, after = call(url, f"api/batches/{batch_id}?status=SUCCEEDED&limit=2")
        assert (after["succeeded"], after["pending"], after["percent"]) == (4, 0, 100.0)
        assert after["children"]["total"] == 4 and len(after["children"]["jobs"]) == 2
        assert after["status"] == "COMPLETED"
        _, listed = call(url, "api/batches")
        assert str(batch_id) in [b["id"] for b in listed["batches"]]
        assert call(url, f"api/batches/{uuid7()}")[0] == 404
        assert call(url, "api/batches/not-an-id")[0] == 400


def test_a_then_and_branch_workflow_is_a_graph(scene: Scene) -> None:
    builder = scene.container.scheduler().job(wt.double).args(5).then(wt.add_one)
    builder.branch(equals(11), if_true=Step(wt.label, "eleven"), if_false=Step(wt.label, "no"))
    builder.enqueue()
    root, step, yes, no = builder.job_ids
    with serve(dashboard_of(scene)) as url:
        _, waiting = call(url, f"api/jobs/{yes}/workflow")
        assert waiting["root_id"] == str(root)
        edges = {(e["from"], e["to"]): e for e in waiting["edges"]}
        assert set(edges) == {(str(root), str(step)), (str(step), str(yes)), (str(step), str(no))}
        assert edges[(str(step), str(yes))]["state"] == "waiting"
        finished = {JobStatus.SUCCEEDED, JobStatus.CANCELLED}
        run_until(
            scene, "the workflow", lambda: all(_status(scene, i) in finished for i in (yes, no))
        )
        _, done = call(url, f"api/jobs/{root}/workflow")
    states = {e["to"]: e["state"] for e in done["edges"]}
    assert states[str(yes)] == "released" and states[str(no)] == "not taken"
    status = {n["id"]: n["status"] for n in done["nodes"]}
    assert status[str(yes)] == "SUCCEEDED" and status[str(no)] == "CANCELLED"


def test_jobs_awaiting_a_signal_are_listed_and_a_signal_is_sent(scene: Scene) -> None:
    key = f"approval-{uuid.uuid4().hex[:8]}"
    scheduler = scene.container.scheduler()
    waiting = scheduler.job(wt.approve).kwargs(order=3).await_signal(key, timeout=3600).enqueue()
    asked: list[tuple[str, str]] = []

    def only_signals(action: str, subject: str, environ: dict[str, Any]) -> bool:
        asked.append((action, subject))
        return action == "signal" and subject == key

    with serve(dashboard_of(scene, permission=only_signals)) as url:
        _, listed = call(url, "api/signals")
        row = next(j for j in listed["jobs"] if j["id"] == str(waiting))
        assert row["signal_key"] == key and row["signal_deadline"] is not None
        assert 3000 < row["seconds_left"] <= 3600
        refused = post(url, "api/signals", {"job_id": str(waiting), "payload": {"by": "x"}})
        assert refused[0] == 403
        status, sent = post(url, "api/signals", {"key": key, "payload": {"by": "ann"}})
        assert status == 200 and sent["delivered"] and sent["outcome"] == "DELIVERED"
        again = post(url, "api/signals", {"key": key, "payload": {"by": "ann"}})
        assert again[0] == 200 and not again[1]["delivered"]
        assert post(url, "api/signals", {})[0] == 400
    run_until(scene, "the signalled job", lambda: _status(scene, waiting) is JobStatus.SUCCEEDED)
    approved = scheduler.get(waiting)
    assert approved is not None and approved.result == json.dumps("order 3: ann")


def test_queues_and_targets_count_depth_running_and_failures(scene: Scene) -> None:
    scheduler = scene.container.scheduler()
    for _ in range(2):
        scheduler.job(targets.add).args(1, 2).execution_target("gpu").delay(0).enqueue()
    with serve(dashboard_of(scene)) as url:
        status, data = call(url, "api/queues")
    assert status == 200 and data["available"] and data["pause"]["supported"] is False
    gpu = next(r for r in data["labels"] if r["name"] == "gpu")
    assert gpu["depth"] == 2 and gpu["due"] == 2 and gpu["oldest_due_seconds"] is not None
    flaky = next(r for r in data["targets"] if r["name"] == "tests.engine.targets:flaky")
    assert flaky["finished"] >= 1 and flaky["failure_rate"] > 0


def test_schedules_trigger_pause_resume_and_show_firings(scene: Scene) -> None:
    name = f"dash-nightly-{uuid.uuid4().hex[:6]}"
    service = scene.container.scheduler().recurring_jobs
    service.declare(name, "0 3 * * *", targets.add, 1, 2)
    with serve(dashboard_of(scene)) as url:
        status, fired = post(url, f"api/recurring/{name}/trigger", {})
        assert status == 200 and fired["job_id"]
        _, shown = call(url, f"api/recurring/{name}")
        assert [f["id"] for f in shown["firings"]] == [fired["job_id"]]
        assert post(url, f"api/recurring/{name}/pause", {})[1]["changed"] is True
        assert call(url, f"api/recurring/{name}")[1]["enabled"] is False
        assert post(url, f"api/recurring/{name}/resume", {})[1]["changed"] is True
        assert post(url, "api/recurring/none-such/trigger", {})[0] == 404
        assert post(url, f"api/recurring/{name}/explode", {})[0] == 404


def test_search_by_key_tag_target_error_and_masked_arguments(scene: Scene, base: str) -> None:
    scheduler = scene.container.scheduler()
    key = f"order-{uuid.uuid4().hex[:8]}"
    keyed = scheduler.job(targets.add).args(4, 5).idempotency_key(key).enqueue()

    def found(q: str) -> dict[str, str]:
        status, data = call(base, "api/jobs?q=" + urllib.request.quote(q))
        assert status == 200, data
        return {j["id"]: j["matched_by"] for j in data["jobs"]}

    assert found(key) == {str(keyed): "idempotency_key"}
    assert found(scene.tag)[str(scene.dead_id)] == "tag"
    assert found("tests.engine.targets:echo_any")[str(scene.secret_id)] == "target"
    assert found("transient failure")[str(scene.dead_id)] == "error"
    assert found('"ada"')[str(scene.secret_id)] == "arguments"
    assert str(scene.secret_id) not in found("hunter2"), "a masked value is never searched"
    assert str(scene.secret_id) in found(str(scene.secret_id))


def _status(scene: Scene, job_id: uuid.UUID) -> JobStatus | None:
    job = scene.store.find_by_id(job_id)
    return None if job is None else job.status
