"""``ratchet recurring ...`` run as a user runs it (a subprocess of the installed script) on a
SQLite database whose definitions the test declared through the scheduler."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from tests.engine.conftest import build_container, migrate
from tests.recurring import targets

RATCHET = Path(sys.executable).with_name("ratchet")
REPO = Path(__file__).resolve().parents[2]


def ratchet(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), RATCHET_SECURITY_ALLOWED_PACKAGES="tests.")
    env.pop("RATCHET_STORE_URL", None)
    env.pop("RATCHET_CONFIG_FILE", None)
    return subprocess.run(
        [str(RATCHET), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.fixture
def declared(tmp_path: Path) -> Iterator[tuple[str, Any]]:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    container = build_container(url)
    store = container.job_store()
    migrate(store)
    scheduler = container.scheduler()
    scheduler.recurring(
        "nightly", "30 2 * * *", targets.tick, "n", tz="Europe/Berlin", tags=["ops"]
    )
    scheduler.recurring("pulse", None, targets.tick, every=timedelta(minutes=5))
    yield url, scheduler
    store.close()


def test_list_shows_every_definition_with_next_fire_in_zone_and_utc(
    declared: tuple[str, Any],
) -> None:
    url, _ = declared
    table = ratchet("recurring", "list", "--url", url)
    assert table.returncode == 0, table.stderr
    assert "nightly" in table.stdout and "pulse" in table.stdout
    assert "Europe/Berlin" in table.stdout and "UTC" in table.stdout
    assert "CET" in table.stdout or "CEST" in table.stdout
    lines = ratchet("recurring", "list", "--json", "--url", url)
    records = {r["id"]: r for r in map(json.loads, lines.stdout.splitlines())}
    assert records["nightly"]["schedule"] == "30 2 * * *"
    assert records["nightly"]["args"] == ["n"] and records["nightly"]["tags"] == ["ops"]
    assert records["pulse"]["schedule"] == "@every 300s"


def test_show_prints_one_definition_and_refuses_an_unknown_id(declared: tuple[str, Any]) -> None:
    url, _ = declared
    shown = ratchet("recurring", "show", "nightly", "--json", "--url", url)
    assert shown.returncode == 0, shown.stderr
    record = json.loads(shown.stdout)
    assert record["target"] == "tests.recurring.targets:tick" and record["state"] == "active"
    table = ratchet("recurring", "show", "nightly", "--url", url)
    assert table.returncode == 0 and "misfire" in table.stdout
    missing = ratchet("recurring", "show", "nope", "--url", url)
    assert missing.returncode == 1 and "recurring job 'nope' not found" in missing.stderr


def test_pause_then_resume(declared: tuple[str, Any]) -> None:
    url, scheduler = declared
    paused = ratchet("recurring", "pause", "nightly", "--url", url)
    assert paused.returncode == 0 and "paused" in paused.stdout, paused.stderr
    assert scheduler.recurring_jobs.get("nightly").enabled is False
    again = ratchet("recurring", "pause", "nightly", "--url", url)
    assert again.returncode == 0 and "already paused" in again.stdout
    resumed = ratchet("recurring", "resume", "nightly", "--url", url)
    assert resumed.returncode == 0 and "resumed" in resumed.stdout
    assert scheduler.recurring_jobs.get("nightly").enabled is True


def test_trigger_enqueues_one_job_now(declared: tuple[str, Any]) -> None:
    url, scheduler = declared
    triggered = ratchet("recurring", "trigger", "pulse", "--url", url)
    assert triggered.returncode == 0, triggered.stderr
    job = scheduler.get(UUID(triggered.stdout.strip()))
    assert job is not None and job.recurring_name == "pulse"


def test_delete_removes_the_definition(declared: tuple[str, Any]) -> None:
    url, scheduler = declared
    deleted = ratchet("recurring", "delete", "pulse", "--url", url)
    assert deleted.returncode == 0 and "deleted" in deleted.stdout, deleted.stderr
    assert scheduler.recurring_jobs.get("pulse") is None
    gone = ratchet("recurring", "delete", "pulse", "--url", url)
    assert gone.returncode == 1 and "not found" in gone.stderr
