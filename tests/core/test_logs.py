"""Queued logging and compact transient store errors (issue 17)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest

from ratchet_api.errors import StoreError, TransientStoreError
from ratchet_core.observability.logs import flush_queued_logging, one_line, start_queued_logging


class Recording(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.threads: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))
        self.threads.append(threading.current_thread().name)


@pytest.fixture
def recording() -> Iterator[Recording]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    handler = Recording()
    start_queued_logging([handler], level=logging.INFO)
    try:
        yield handler
    finally:
        flush_queued_logging()
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in saved[0]:
            root.addHandler(h)
        root.setLevel(saved[1])


def _raise_transient() -> None:
    try:
        raise ConnectionResetError("server closed the connection unexpectedly")
    except ConnectionResetError as exc:
        raise TransientStoreError("claim_next_batch failed: lost connection") from exc


def test_a_transient_store_error_is_logged_on_one_line(recording: Recording) -> None:
    try:
        _raise_transient()
    except TransientStoreError:
        logging.getLogger("ratchet.worker").warning("claiming failed", exc_info=True)
    flush_queued_logging()
    assert len(recording.lines) == 1
    (line,) = recording.lines
    assert "\n" not in line and "Traceback" not in line
    assert "TransientStoreError: claim_next_batch failed: lost connection" in line
    assert "ConnectionResetError" in line


def test_other_errors_keep_their_traceback_rendered_on_the_listener_thread(
    recording: Recording,
) -> None:
    value = {"n": 1}
    try:
        raise StoreError("schema missing")
    except StoreError:
        logging.getLogger("ratchet.worker").exception("opening failed %s", value)
    value["n"] = 2  # arguments are merged at the call, not when the listener renders
    flush_queued_logging()
    (line,) = recording.lines
    assert "Traceback" in line and "opening failed {'n': 1}" in line
    assert recording.threads != [threading.current_thread().name]


def test_one_line_names_the_cause() -> None:
    try:
        _raise_transient()
    except TransientStoreError as exc:
        assert one_line(exc) == (
            "TransientStoreError: claim_next_batch failed: lost connection (caused by "
            "ConnectionResetError: server closed the connection unexpectedly)"
        )
