"""``ratchet health`` as a probe runs it: exit 1 with the failing check named, 0 when healthy."""

from __future__ import annotations

import json
from pathlib import Path

from tests.engine.test_cli_jobs import ratchet


def test_health_exit_codes_follow_the_checks(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'health.db'}"
    missing = ratchet("health", "--url", url)
    assert missing.returncode == 1
    assert "schema  FAIL" in missing.stdout and "ratchet db upgrade" in missing.stdout

    assert ratchet("db", "upgrade", "--url", url).returncode == 0
    healthy = ratchet("health", "--url", url)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "store   ok" in healthy.stdout and "nodes   ok" in healthy.stdout

    no_worker = ratchet("health", "--min-nodes", "1", "--json", "--url", url)
    assert no_worker.returncode == 1
    report = json.loads(no_worker.stdout)
    assert report["status"] == "unhealthy"
    assert report["checks"]["nodes"]["ok"] is False
    assert report["checks"]["schema"]["ok"] is True

    unreachable = ratchet("health", "--url", "postgresql://127.0.0.1:1/none")
    assert unreachable.returncode == 1 and "store   FAIL" in unreachable.stdout
