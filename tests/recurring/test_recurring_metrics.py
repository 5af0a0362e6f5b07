"""Recurring slots are reported to statsd (``ratchet.recurring.slots``) on a real UDP socket."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import attrs
import pytest

from ratchet_api.store.protocols import RecurringJobStore
from ratchet_core.features.recurring.runner import metrics_hook
from ratchet_core.features.recurring.settings import RecurringSettings
from ratchet_core.features.recurring.sweeper import RecurringSweeper
from tests.engine.conftest import build_container, migrate
from tests.engine.test_metrics_statsd import received
from tests.recurring import targets
from tests.recurring.test_recurring_store import backdate


@pytest.fixture
def udp() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    yield sock
    sock.close()


def test_fired_late_and_skipped_slots_are_counted(tmp_path: Path, udp: socket.socket) -> None:
    container = build_container(
        f"sqlite:///{tmp_path / 'm.db'}",
        **{"metrics.backend": "statsd", "metrics.statsd.port": udp.getsockname()[1]},
    )
    store = container.job_store()
    migrate(store)
    scheduler = container.scheduler()
    scheduler.recurring("on-time", timedelta(hours=1), targets.tick)
    scheduler.recurring("catch-up", timedelta(hours=1), targets.tick, misfire="fire_once")
    scheduler.recurring("dropped", timedelta(hours=1), targets.tick, misfire="skip")
    rec = store.capability(RecurringJobStore)
    on_time = rec.find_recurring("on-time")
    rec.save_recurring(
        attrs.evolve(on_time, next_fire_at=store.server_now() - timedelta(seconds=5))
    )
    backdate(store, "catch-up", timedelta(hours=3, minutes=30))
    backdate(store, "dropped", timedelta(hours=3, minutes=30))
    hook = metrics_hook(container.metrics_collector())
    assert hook is not None
    RecurringSweeper(store, RecurringSettings(), metrics=hook).sweep()
    lines = set(received(udp, until=lambda got: len(got) >= 4))
    assert "ratchet.recurring.slots,recurring=on-time,outcome=fired:1|c" in lines
    assert "ratchet.recurring.slots,recurring=catch-up,outcome=late:1|c" in lines
    assert "ratchet.recurring.slots,recurring=catch-up,outcome=skipped:3|c" in lines
    assert "ratchet.recurring.slots,recurring=dropped,outcome=skipped:4|c" in lines
    store.close()


def test_a_collector_without_the_optional_callback_is_fine() -> None:
    class Minimal:
        pass

    assert metrics_hook(Minimal()) is None  # type: ignore[arg-type]
    assert metrics_hook(None) is None
