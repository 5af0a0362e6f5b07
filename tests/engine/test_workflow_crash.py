"""A worker process killed (SIGKILL) after it wrote a parent's success and before it released
the parent's steps: another worker's maintenance sweep settles them and the workflow completes
exactly as without the kill (every step runs once).

The window is produced by fault injection in the victim process (``workflow_crash_fault``:
settling stalls once the parent's success is committed), because a kill timed from outside
cannot land between two statements reliably; the kill itself and the recovery are real
processes on real stores.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ratchet_api.model import JobStatus
from tests.engine import workflow_targets as t
from tests.engine.conftest import build_container, migrate
from tests.engine.test_crash_worker import stop, wait_for

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
RATCHET = str(Path(sys.executable).with_name("ratchet"))


def start_worker(
    url: str, node_id: str, cwd: Path, *, stall_marker: Path | None = None
) -> subprocess.Popen[bytes]:
    settings = {
        "store.url": url,
        "security.allowed_packages": "tests.",
        "node.id": node_id,
        "worker.node_timeout": "2",
        "worker.heartbeat_interval": "0.3",
        "worker.recovery_interval": "0.5",
        "worker.poll_max_interval": "0.1",
    }
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("RATCHET_CONFIG_FILE", None)
    if stall_marker is not None:
        settings["alternatives.modules"] = "tests.engine.workflow_crash_fault"
        env["RATCHET_TEST_STALL_MARKER"] = str(stall_marker)
    command = [RATCHET]
    for key, value in settings.items():
        command += ["--set", f"{key}={value}"]
    command += ["worker", "--no-status", "--log-level", "WARNING", "-c", "2"]
    return subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def lines(path: Path) -> collections.Counter[str]:
    if not path.exists():
        return collections.Counter()
    return collections.Counter(path.read_text().splitlines())


def test_killed_between_parent_success_and_step_release_the_workflow_still_completes(
    store_url: str, tmp_path: Path
) -> None:
    container = build_container(store_url)
    store = container.job_store()
    migrate(store)
    scheduler = container.scheduler()
    log = tmp_path / "steps.log"
    marker = tmp_path / "stalled"
    tag = uuid.uuid4().hex[:6]
    builder = scheduler.job(t.record).args(str(log), f"root-{tag}")
    builder.then(t.record_after, str(log), f"child-{tag}")
    builder.then(t.record_after, str(log), f"grandchild-{tag}")
    builder.on_failure(t.label, "never")  # on the grandchild: cancelled once it succeeded
    root = builder.enqueue()
    child = builder.job_ids[1]
    victim = start_worker(store_url, f"victim-{tag}", tmp_path, stall_marker=marker)
    survivor = None
    try:
        wait_for(marker.exists, 60, "the victim to write the parent's success")
        assert store.find_by_id(root).status is JobStatus.SUCCEEDED
        assert store.find_by_id(child).status is JobStatus.WAITING, "released before the kill"
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        survivor = start_worker(store_url, f"survivor-{tag}", tmp_path)

        def done() -> bool:
            return all(store.find_by_id(i).status.is_terminal for i in builder.job_ids)

        wait_for(done, 90, "the workflow to finish after the crash")
        statuses = [store.find_by_id(i).status for i in builder.job_ids]
        assert statuses == [JobStatus.SUCCEEDED] * 3 + [JobStatus.CANCELLED]
        counts = lines(log)
        assert counts == collections.Counter(
            {
                f"root-{tag}": 1,
                f"child-{tag} after root-{tag}": 1,
                f"grandchild-{tag} after child-{tag} after root-{tag}": 1,
            }
        ), counts
        survivor.send_signal(signal.SIGTERM)
        assert survivor.wait(30) == 0
    finally:
        stop(victim)
        if survivor is not None:
            stop(survivor)
        store.close()
