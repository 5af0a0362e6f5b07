"""Exactly once per slot with real ``ratchet worker`` processes: three workers declare the same
1-second recurring job from configuration and fire it together; one is SIGKILLed halfway.
Counted from the jobs: every slot between the first and the last fired once, none twice, none
skipped. ``RATCHET_RECURRING_SOAK_SECONDS`` sets the run length (default 20; the issue's figure
is 60)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from ratchet_api.model import JobStatus
from ratchet_api.store.entities import JobQuery
from ratchet_api.store.protocols import JobQueryStore
from tests.engine.conftest import build_container, migrate
from tests.recurring.targets import __name__ as targets_module

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
RATCHET = str(Path(sys.executable).with_name("ratchet"))
SOAK_SECONDS = float(os.environ.get("RATCHET_RECURRING_SOAK_SECONDS", "20"))


def start_worker(url: str, node_id: str, declaration: str, cwd: Path) -> subprocess.Popen[bytes]:
    settings = {
        "store.url": url,
        "security.allowed_packages": "tests.",
        "node.id": node_id,
        "worker.node_timeout": "2",
        "worker.heartbeat_interval": "0.3",
        "worker.recovery_interval": "0.5",
        "worker.poll_max_interval": "0.2",
        "recurring.poll_interval": "0.2",
        "recurring": declaration,
    }
    command = [RATCHET]
    for key, value in settings.items():
        command += ["--set", f"{key}={value}"]
    command += ["worker", "--no-status", "--log-level", "WARNING", "-c", "2"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("RATCHET_CONFIG_FILE", None)
    return subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def test_three_workers_fire_each_slot_once_through_a_sigkill(
    store_url: str, tmp_path: Path
) -> None:
    container = build_container(store_url)
    store = container.job_store()
    migrate(store)
    queries = store.capability(JobQueryStore)
    assert queries is not None
    name = f"soak-{uuid.uuid4().hex[:8]}"
    declaration = json.dumps(
        [{"id": name, "every": 1, "target": f"{targets_module}:tick", "misfire": "fire_all"}]
    )
    tag = f"recurring:{name}"

    def fired() -> list[object]:
        return queries.search_jobs(JobQuery(tag=tag, limit=10_000))  # type: ignore[return-value]

    workers = [start_worker(store_url, f"w{i}-{name}", declaration, tmp_path) for i in range(3)]
    try:
        deadline = time.monotonic() + 60
        while not fired() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert fired(), "no slot fired within 60 s"
        started = time.monotonic()
        time.sleep(SOAK_SECONDS / 2)
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait(10)
        time.sleep(SOAK_SECONDS / 2)
        for w in workers[1:]:
            w.send_signal(signal.SIGTERM)
        for w in workers[1:]:
            output = w.communicate(timeout=60)[0].decode(errors="replace")
            assert w.returncode == 0, output
        elapsed = time.monotonic() - started
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait(10)
    jobs = fired()

    # A slot is read from its job's key (``recurring:<id>@<slot>``), not from ``scheduled_at``:
    # the job the SIGKILLed worker was running is recovered with ``scheduled_at`` = the
    # recovery time, off the grid (CI saw it once: gaps of 0.241 s and 0.759 s after the
    # recovery, and of 2 s where the slot's own time was).
    def slot_of(job: Any) -> datetime:
        return datetime.fromisoformat(str(job.idempotency_key).rsplit("@", 1)[1])

    slots = Counter(slot_of(j) for j in jobs)
    assert all(slot_of(j) <= j.scheduled_at for j in jobs)  # type: ignore[attr-defined]
    ordered = sorted(slots)
    gaps = Counter(b - a for a, b in pairwise(ordered))
    succeeded = sum(1 for j in jobs if j.status is JobStatus.SUCCEEDED)  # type: ignore[attr-defined]
    print(
        f"\n[{store_url.split(':', 1)[0]}] {len(ordered)} slots in {elapsed:.1f}s "
        f"({ordered[0].isoformat()} .. {ordered[-1].isoformat()}), max jobs per slot "
        f"{max(slots.values())}, {succeeded} succeeded"
    )
    assert max(slots.values()) == 1, "a slot fired twice"
    assert set(gaps) == {timedelta(seconds=1)}, f"a slot was skipped: {gaps}"
    assert len(ordered) >= SOAK_SECONDS - 2
    store.close()
