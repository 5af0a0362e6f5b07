"""Heartbeats never wait on logging or on other work (issue 17).

A job logs tracebacks through a handler that takes 1.5 s per record (rich rendering took 3-5 s
on a busy machine) while the recovery sweep logs a warning about a stale job: with
``start_queued_logging`` (what ``ratchet worker`` installs) the records are rendered on the
listener thread, and the heartbeat thread does nothing but heartbeat, so the node's stored
heartbeats stay one interval apart.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ratchet_core.observability.logs import flush_queued_logging, start_queued_logging
from tests.engine import targets
from tests.engine.conftest import build_container, migrate

INTERVAL = 0.2
SLOW = 2.5


class SlowHandler(logging.Handler):
    """Renders like a slow terminal: each record takes ``SLOW`` seconds."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        time.sleep(SLOW)
        self.messages.append(self.format(record))


@pytest.fixture
def slow_handler() -> Iterator[SlowHandler]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    handler = SlowHandler()
    start_queued_logging([handler], level=logging.WARNING)
    try:
        yield handler
    finally:
        flush_queued_logging(timeout=0)
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in saved[0]:
            root.addHandler(h)
        root.setLevel(saved[1])


def test_tracebacks_on_job_threads_do_not_delay_heartbeats(
    slow_handler: SlowHandler, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'liveness.db'}"
    container = build_container(
        url,
        **{
            "worker.heartbeat_interval": str(INTERVAL),
            "worker.recovery_interval": "0.3",
            "worker.node_timeout": "1",
        },
    )
    store = container.job_store()
    migrate(store)
    scheduler = container.scheduler()
    # A RUNNING job of a node that never heartbeats: recovery logs a warning about it.
    scheduler.enqueue(targets.add, 1, 2)
    assert store.claim_next_batch("ghost-node", 1)
    scheduler.enqueue(targets.log_tracebacks, 3)
    worker = container.worker()
    beats: list[float] = []
    done = threading.Event()

    def watch() -> None:
        last = None
        while not done.is_set():
            for node in store.find_all_nodes():
                if node.node_id == worker.node_id and node.last_heartbeat != last:
                    last = node.last_heartbeat
                    beats.append(last.timestamp())
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    worker.start()
    watcher.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and worker.stats.succeeded < 1:
            time.sleep(0.05)
        time.sleep(3 * SLOW)  # the handler is still busy with the job's tracebacks
    finally:
        done.set()
        watcher.join(5)
        worker.stop(timeout=5)
        store.close()
    assert worker.stats.succeeded >= 1
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    assert len(gaps) > 10, beats
    # a heartbeat that waited on the handler would leave a gap of SLOW; 0.8 * SLOW is ten
    # intervals, the room a loaded machine needs
    assert max(gaps) < SLOW * 0.8, f"heartbeat gaps {sorted(gaps)[-5:]}"
