"""Stored data cannot attack the terminal (issue 26): arguments, errors, targets and log lines
that look like rich markup (``[/oops]``) or carry escape sequences are printed verbatim by
``ratchet jobs list`` and ``ratchet jobs show`` (markup shown as written, control characters as
``\\x1b`` escapes), which exit 0. Run as a user runs them (the installed script) on SQLite and
PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ratchet_api.model import JobStatus
from tests.engine import hostile_targets
from tests.engine.conftest import build_container, migrate

RATCHET = Path(sys.executable).with_name("ratchet")
REPO = Path(__file__).resolve().parents[2]
MARKUP = "[/oops] [/etc/app] [bold]x"
ESCAPES = "\x1b[2J\x1b[31mred\rback\x07"


def ratchet(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), RATCHET_SECURITY_ALLOWED_PACKAGES="tests.")
    env.pop("RATCHET_STORE_URL", None)
    return subprocess.run(
        [str(RATCHET), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
        check=False,
    )


def assert_verbatim(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stderr
    assert "MarkupError" not in result.stderr
    assert "\x1b" not in result.stdout and "\r" not in result.stdout and "\x07" not in result.stdout
    assert "\\x1b[2J" in result.stdout


def test_jobs_list_and_show_print_stored_data_verbatim(
    sql_container: Any, sql_store_url: str, make_worker: Any
) -> None:
    scheduler = sql_container.scheduler()
    tag = f"hostile-cli-{os.getpid()}"
    failed = (
        scheduler.job(hostile_targets.raise_message)
        .args(f"{MARKUP} {ESCAPES}")
        .tags(tag)
        .max_retries(0)
        .enqueue()
    )
    logged = scheduler.job(hostile_targets.log_line).args(f"{MARKUP} {ESCAPES}").tags(tag).enqueue()
    echoed = scheduler.job(hostile_targets.echo).args(f"{MARKUP} {ESCAPES}").tags(tag).enqueue()
    make_worker(sql_container).run_until_idle(30)
    assert scheduler.get(failed).status is JobStatus.FAILED
    assert scheduler.get(echoed).status is JobStatus.SUCCEEDED

    listed = ratchet("jobs", "list", "--tag", tag, "--url", sql_store_url)
    assert_verbatim(listed)
    assert "[/oops]" in listed.stdout
    for job_id in (failed, logged, echoed):
        shown = ratchet("jobs", "show", str(job_id), "--url", sql_store_url)
        assert_verbatim(shown)
        assert "[/oops] [/etc/app] [bold]x" in shown.stdout


def test_jobs_list_does_not_load_whole_results_or_arguments(
    sql_store_url: str, make_worker: Any
) -> None:
    import json

    from ratchet_api.store.entities import JobQuery
    from ratchet_api.store.protocols import JobQueryStore

    made = build_container(sql_store_url, **{"limits.max_result_bytes": "0"})
    migrate(made.job_store())
    try:
        scheduler = made.scheduler()
        tag = f"large-{os.getpid()}-{id(made)}"
        large = scheduler.job(hostile_targets.big_result).args(300_000).tags(tag).enqueue()
        wide = scheduler.job(hostile_targets.echo).args("y" * 200_000).tags(tag).enqueue()
        make_worker(made).run_until_idle(30)
        queries = made.job_store().capability(JobQueryStore)
        assert queries is not None
        listed = queries.search_jobs(JobQuery(tag=tag, preview=100))
        by_id = {j.id: j for j in listed}
        # the store returns at most preview + 1 characters of each: a listing loads no more
        assert len(by_id[large].result or "") == 101 and len(by_id[wide].payload) == 101
        whole = made.job_store().find_by_id(large)
        assert whole is not None and len(whole.result or "") > 300_000
    finally:
        made.job_store().close()
    result = ratchet("jobs", "list", "--tag", tag, "--json", "--url", sql_store_url)
    assert result.returncode == 0, result.stderr
    records = {r["id"]: r for r in map(json.loads, result.stdout.splitlines())}
    assert records[str(large)]["result_cut"] is True and records[str(large)]["result"] is None
    assert records[str(wide)]["arguments_cut"] is True
    assert records[str(wide)]["unreadable"] is None
    table = ratchet("jobs", "list", "--tag", tag, "--url", sql_store_url)
    assert table.returncode == 0 and "(result over 4096 characters: jobs show)" in table.stdout
