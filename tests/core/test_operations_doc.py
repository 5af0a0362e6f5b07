"""docs/operations.md's workers' Deployment stays in step with the worker's shutdown: the pod's
grace period outlasts ``worker.shutdown_timeout`` (the default, and the value the pod sets)."""

from __future__ import annotations

import re
from pathlib import Path

from ratchet_core.runtime.config import parse_duration
from ratchet_core.worker.settings import WORKER_SHUTDOWN_TIMEOUT

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def test_grace_period_outlasts_the_shutdown_timeout() -> None:
    text = DOC.read_text(encoding="utf-8")
    grace = [int(g) for g in re.findall(r"terminationGracePeriodSeconds: (\d+)", text)]
    timeouts = re.findall(r"RATCHET_WORKER_SHUTDOWN_TIMEOUT, value: \"([^\"]+)\"", text)
    assert grace and timeouts, "the Deployment sets both"
    set_timeout = parse_duration(timeouts[0]).total_seconds()
    default = WORKER_SHUTDOWN_TIMEOUT.default.total_seconds()
    assert set_timeout == default, "the doc's comment names the default"
    assert f"worker.shutdown_timeout ({default:g} s)" in text
    # the pod must outlast the jobs' time plus the final outcome writes and the node's removal
    assert all(g >= set_timeout + 10 for g in grace), (grace, set_timeout)
