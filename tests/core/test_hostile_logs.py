"""The worker's log treats stored data as text (issue 26): control characters are escaped and
continuation lines indented, so a target name or an error cannot send escape sequences to the
terminal or forge a log line; a store error's one-line form carries no credentials."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from ratchet_api.errors import TransientStoreError
from ratchet_core.observability.logs import flush_queued_logging, one_line, start_queued_logging


class Recording(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def recording() -> Iterator[Recording]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    handler = Recording()
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
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


def test_stored_text_cannot_forge_a_log_line_or_reach_the_terminal(recording: Recording) -> None:
    target = "myapp.jobs:run\nERROR job 1 sent to the dead letter: forged"
    error = "boom\x1b[2J\x1b]0;title\x07\rover"
    logging.getLogger("ratchet.worker").error("job %s failed: %s", target, error)
    flush_queued_logging()
    assert len(recording.lines) == 1
    text = recording.lines[0]
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    assert "\\x1b[2J" in text and "\\x0d" in text
    lines = text.split("\n")
    assert lines[0].startswith("ERROR job myapp.jobs:run")
    assert all(line.startswith("    ") for line in lines[1:])  # cannot pass for a log line


def test_the_one_line_form_of_a_store_error_carries_no_credentials() -> None:
    try:
        try:
            raise ConnectionError("connect to postgresql://app:hunter2@db:5432/x failed")
        except ConnectionError as exc:
            raise TransientStoreError("claim failed: password=s3cr3t rejected") from exc
    except TransientStoreError as exc:
        text = one_line(exc)
    assert "hunter2" not in text and "s3cr3t" not in text
    assert "db:5432/x" in text and "claim failed" in text
