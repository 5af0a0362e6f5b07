"""The ``ratchet`` command line, run as a user runs it (a subprocess of the installed script) on
a SQLite database: db upgrade/current, enqueue, jobs list/show/cancel/retry, demo."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from uuid import UUID

import pytest

RATCHET = Path(sys.executable).with_name("ratchet")
REPO = Path(__file__).resolve().parents[2]


def ratchet(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    env["RATCHET_SECURITY_ALLOWED_PACKAGES"] = "tests."
    env.pop("RATCHET_STORE_URL", None)
    return subprocess.run(
        [str(RATCHET), *args],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    result = ratchet("db", "upgrade", "--url", url)
    assert result.returncode == 0, result.stderr
    assert "upgraded from empty to" in result.stdout
    return url


def test_db_upgrade_is_idempotent_and_current_reports_the_revision(db_url: str) -> None:
    again = ratchet("db", "upgrade", "--url", db_url)
    assert again.returncode == 0 and "already at revision" in again.stdout
    current = ratchet("db", "current", "--url", db_url)
    assert current.returncode == 0 and current.stdout.strip() not in ("", "none")


def test_enqueue_then_list_show_and_cancel(db_url: str) -> None:
    enqueued = ratchet(
        "enqueue", "tests.engine.targets:greet", "ada", "-k", 'punctuation="?"',
        "--tag", "cli", "--priority", "high", "--url", db_url,
    )  # fmt: skip
    assert enqueued.returncode == 0, enqueued.stderr
    job_id = UUID(enqueued.stdout.strip())

    listed = ratchet("jobs", "list", "--tag", "cli", "--json", "--url", db_url)
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(r["id"], r["status"], r["priority"]) for r in rows] == [
        (str(job_id), "PENDING", "high")
    ]

    table = ratchet("jobs", "list", "--status", "pending", "--url", db_url)
    assert table.returncode == 0 and str(job_id) in table.stdout

    shown = ratchet("jobs", "show", str(job_id), "--json", "--url", db_url)
    assert shown.returncode == 0, shown.stderr
    detail = json.loads(shown.stdout)
    assert detail["target"] == "tests.engine.targets:greet"
    assert detail["args"] == ["ada"] and detail["kwargs"] == {"punctuation": "?"}

    cancelled = ratchet("jobs", "cancel", str(job_id), "--url", db_url)
    assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout
    again = ratchet("jobs", "cancel", str(job_id), "--url", db_url)
    assert again.returncode == 1 and "CANCELLED" in again.stderr
    retried = ratchet("jobs", "retry", str(job_id), "--url", db_url)
    assert retried.returncode == 1 and "only FAILED" in retried.stderr

    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        (status,) = conn.execute(
            "SELECT status FROM ratchet_jobs WHERE target = 'tests.engine.targets:greet'"
        ).fetchone()
    assert status == "CANCELLED"


def test_errors_have_clear_messages_and_exit_codes(db_url: str) -> None:
    missing = ratchet("jobs", "show", "0190a0a0-0000-7000-8000-000000000000", "--url", db_url)
    assert missing.returncode == 1
    assert "job 0190a0a0-0000-7000-8000-000000000000 not found" in missing.stderr
    bad_id = ratchet("jobs", "show", "0190", "--url", db_url)
    assert bad_id.returncode == 2 and "is not a job id" in bad_id.stderr
    arity = ratchet("enqueue", "tests.engine.targets:add", "1", "--url", db_url)
    assert arity.returncode == 1 and "missing a required argument" in arity.stderr
    nope = ratchet("enqueue", "tests.engine.nope:f", "--url", db_url)
    assert nope.returncode == 2 and "cannot import module" in nope.stderr  # a usage error
    usage = ratchet("enqueue", "no-colon", "--url", db_url)
    assert usage.returncode == 2
    scheme = ratchet("jobs", "list", "--url", "redis://127.0.0.1/0")
    assert scheme.returncode == 1 and "store.url" in scheme.stderr
    for command in (
        ["jobs", "--help"],
        ["enqueue", "--help"],
        ["db", "--help"],
        ["demo", "--help"],
    ):
        assert ratchet(*command).returncode == 0


def test_demo_runs_every_example_to_its_expected_end(tmp_path: Path) -> None:
    result = ratchet("demo", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "What happened" in out
    for expected in (
        "welcome email sent to ada@example.com",
        "invoice for ACME: 2 orders, total 64.90",
        "synchronised on attempt 3",
        "PermissionError: card ending 4242 was declined",
        "1 USD = 0.92 EUR",
    ):
        assert expected in out
    with sqlite3.connect(tmp_path / "ratchet-demo.db") as conn:
        rows = dict(
            conn.execute(
                "SELECT substr(target, instr(target, ':') + 1), status || '/' || attempt "
                "FROM ratchet_jobs"
            ).fetchall()
        )
    assert rows == {
        "send_welcome_email": "SUCCEEDED/1",
        "invoice_total": "SUCCEEDED/1",
        "sync_inventory": "SUCCEEDED/3",
        "charge_card": "FAILED/3",
        "fetch_exchange_rate": "SUCCEEDED/1",
    }
