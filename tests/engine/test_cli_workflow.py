"""``ratchet jobs show`` draws a job's workflow; ``ratchet signal`` delivers a signal (the
installed script as a subprocess, on SQLite)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ratchet_api.model import JobStatus
from ratchet_api.workflow import Step, equals
from tests.engine import workflow_targets as t
from tests.engine.conftest import build_container, migrate
from tests.engine.test_cli_jobs import ratchet
from tests.engine.worker_fixtures import fast_settings


def _container(url: str) -> Any:
    container = build_container(url)
    migrate(container.job_store())
    return container


def test_jobs_show_draws_the_workflow_with_the_branch_taken(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'flow.db'}"
    container = _container(url)
    scheduler = container.scheduler()
    builder = scheduler.job(t.double).args(5).then(t.add_one)
    builder.branch(equals(11), if_true=Step(t.label, "yes"), if_false=Step(t.label, "no"))
    builder.enqueue()
    container.worker(worker_settings=fast_settings()).run_until_idle(timeout=30)
    root, step, yes, no = builder.job_ids
    shown = ratchet("jobs", "show", str(step), "--url", url)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "workflow" in text
    assert f"tests.engine.workflow_targets:double {root} SUCCEEDED" in text
    assert f"[then] tests.engine.workflow_targets:add_one {step} SUCCEEDED" in text
    assert f"{yes} SUCCEEDED (taken)" in text
    assert f"{no} CANCELLED (not taken)" in text
    assert "<- this job" in text
    as_json = ratchet("jobs", "show", str(root), "--json", "--url", url)
    tree = json.loads(as_json.stdout)["workflow"]
    assert tree["id"] == str(root)
    branch_sides = tree["children"][0]["children"]
    assert [side["branch"] for side in branch_sides] == ["taken", "not taken"]
    plain = scheduler.enqueue(t.label, "alone")
    assert "<- this job" not in ratchet("jobs", "show", str(plain), "--url", url).stdout


def test_signal_command_delivers_and_reports(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'signal.db'}"
    container = _container(url)
    scheduler = container.scheduler()
    waiting = scheduler.job(t.approve).kwargs(order=4).await_signal("cli-approval").enqueue()
    delivered = ratchet("signal", "cli-approval", '{"by": "cli"}', "--url", url)
    assert delivered.returncode == 0, delivered.stderr + delivered.stdout
    assert f"job {waiting}: DELIVERED" in delivered.stdout
    assert container.job_store().find_by_id(waiting).status is JobStatus.PENDING
    again = ratchet("signal", str(waiting), "--url", url)
    assert again.returncode == 1
    assert "ALREADY_DELIVERED" in again.stdout + again.stderr
    bad = ratchet("signal", "cli-approval", "{not json", "--url", url)
    assert bad.returncode == 2 and "not JSON" in bad.stderr
    missing = ratchet("signal", "nobody-waits", "--url", url)
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr
