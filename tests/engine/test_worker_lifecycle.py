"""A clean stop looks clean (issues 15 and 19): ``Worker.stop()`` closes the
``ClusterCoordinator`` and removes the node's row, so the next start reports no dead node."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dependency_injector import providers

from ratchet_api.model import JobWakeupHint
from tests.engine.conftest import build_container, migrate
from tests.engine.test_crash_worker import start_worker, stop, wait_for


class _Coordinator:
    """A ClusterCoordinator without transport that records ``close``."""

    def __init__(self) -> None:
        self.closed = 0

    def notify_new_work(self, priority: Any, source: Any, execution_target: str | None) -> None:
        pass

    def register_wakeup_listener(self, listener: Callable[[JobWakeupHint], None]) -> None:
        pass

    def close(self) -> None:
        self.closed += 1


def test_stop_closes_the_cluster_coordinator_and_removes_the_node_row(
    sqlite_url: str, make_worker: Any
) -> None:
    container = build_container(sqlite_url)
    store = container.job_store()
    migrate(store)
    coordinator = _Coordinator()
    with container.cluster_coordinator.override(providers.Object(coordinator)):
        worker = make_worker(container)
        worker.start()
        assert worker.node_id in {n.node_id for n in store.find_all_nodes()}
        worker.stop()
    assert coordinator.closed == 1
    assert worker.node_id not in {n.node_id for n in store.find_all_nodes()}
    store.close()


def test_a_restart_after_sigterm_reports_no_dead_node(sqlite_url: str, tmp_path: Path) -> None:
    store = build_container(sqlite_url).job_store()
    migrate(store)
    first_id = f"first-{uuid.uuid4().hex[:8]}"
    first = start_worker(sqlite_url, first_id, tmp_path)
    try:
        wait_for(
            lambda: first_id in {n.node_id for n in store.find_all_nodes()}, 60, "the first start"
        )
        first.send_signal(signal.SIGTERM)
        first_output = first.communicate(timeout=60)[0].decode(errors="replace")
        assert first.returncode == 0, first_output
    finally:
        stop(first)
    time.sleep(2.5)  # past worker.node_timeout (2 s): a left-over row would now be "dead"
    second_id = f"second-{uuid.uuid4().hex[:8]}"
    second = start_worker(sqlite_url, second_id, tmp_path)
    try:
        wait_for(
            lambda: second_id in {n.node_id for n in store.find_all_nodes()}, 60, "the restart"
        )
        time.sleep(1.0)  # the start-up recovery sweep has run (recovery_interval 0.5 s)
        second.send_signal(signal.SIGTERM)
        output = second.communicate(timeout=60)[0].decode(errors="replace")
    finally:
        stop(second)
    assert second.returncode == 0, output
    assert "stopped heartbeating" not in output, output
    store.close()
