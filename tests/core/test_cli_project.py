"""The ``ratchet`` command run from a project directory, as a new user runs it: the project's
own job module is importable without PYTHONPATH, and a worker on an unmigrated database says
which command creates the schema."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RATCHET = str(Path(sys.executable).with_name("ratchet"))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    package = tmp_path / "myapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "jobs.py").write_text(
        "def send_invoice(order_id: int, email: str) -> str:\n"
        "    return f'invoice {order_id} sent to {email}'\n"
    )
    return tmp_path


def ratchet(project: Path, *args: str, db: str = "app.db") -> subprocess.CompletedProcess[str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("RATCHET_") and key != "PYTHONPATH"
    }
    env["RATCHET_STORE_URL"] = f"sqlite:///{db}"
    env["RATCHET_SECURITY_ALLOWED_PACKAGES"] = "myapp"
    return subprocess.run(
        [RATCHET, *args],
        check=False,
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_worker_run_from_the_project_directory_imports_the_job_module(project: Path) -> None:
    assert ratchet(project, "db", "upgrade").returncode == 0
    enqueued = ratchet(project, "enqueue", "myapp.jobs:send_invoice", "42", "ada@example.com")
    assert enqueued.returncode == 0, enqueued.stderr
    job_id = enqueued.stdout.strip()

    worked = ratchet(project, "worker", "--burst", "--no-status", "--burst-timeout", "30")
    assert worked.returncode == 0, worked.stderr

    listed = ratchet(project, "jobs", "list", "--json")
    jobs = {row["id"]: row for row in map(json.loads, listed.stdout.splitlines())}
    assert jobs[job_id]["status"] == "SUCCEEDED"
    assert "invoice 42 sent to ada@example.com" in json.dumps(jobs[job_id])


def test_worker_on_an_unmigrated_database_tells_to_run_db_upgrade(project: Path) -> None:
    result = ratchet(project, "worker", "--burst", "--no-status", db="empty.db")
    assert result.returncode == 1
    assert "has no Ratchet schema yet; run `ratchet db upgrade`" in result.stderr


def test_enqueue_of_a_missing_function_names_module_and_attribute(project: Path) -> None:
    assert ratchet(project, "db", "upgrade").returncode == 0
    result = ratchet(project, "enqueue", "myapp.jobs:send_invoce", "1")
    assert result.returncode == 2
    assert "module 'myapp.jobs' has no attribute 'send_invoce'" in result.stderr


def test_ratchet_tck_runs_the_compatibility_kit_command(project: Path) -> None:
    result = ratchet(project, "tck", "report", "--help")
    assert result.returncode == 0, result.stderr
    assert "--fixture" in result.stdout
