"""``ratchet batches list|show`` and ``ratchet jobs list --batch``, run as the installed script
on a SQLite database."""

from __future__ import annotations

import json
from pathlib import Path

from tests.engine import batch_targets as bt
from tests.engine.conftest import build_container, migrate
from tests.engine.test_cli_jobs import ratchet


def test_batches_list_show_and_children(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    container = build_container(url)
    store = container.job_store()
    migrate(store)
    log = str(tmp_path / "calls.log")
    batch_id = (
        container.scheduler()
        .batch("cli-batch")
        .add_many(bt.child, [(log, i) for i in range(3)])
        .enqueue()
    )
    store.close()

    listed = ratchet("batches", "list", "--json", "--url", url)
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(r["id"], r["name"], r["total"], r["pending"]) for r in rows] == [
        (str(batch_id), "cli-batch", 3, 3)
    ]
    shown = ratchet("batches", "show", str(batch_id), "--url", url)
    assert shown.returncode == 0 and "cli-batch" in shown.stdout and "SEALED" in shown.stdout
    children = ratchet("jobs", "list", "--batch", str(batch_id), "--json", "--url", url)
    assert children.returncode == 0, children.stderr
    assert len(children.stdout.splitlines()) == 3
    missing = ratchet("batches", "show", "not-a-uuid", "--url", url)
    assert missing.returncode != 0 and "not a batch id" in missing.stderr
