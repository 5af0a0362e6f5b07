"""The loguru job logger: bound context, buffered stored logs through the audit capability."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from ratchet_api.model import JobLoggerContext
from ratchet_api.store.entities import JobLogLine, LogLevel
from ratchet_api.store.protocols import JobAuditStore
from ratchet_core.defaults.logging import LoguruJobLoggerFactory
from ratchet_core.runtime.container import create_container


@pytest.fixture
def records() -> Iterator[list[dict[str, Any]]]:
    captured: list[dict[str, Any]] = []
    sink_id = logger.add(lambda m: captured.append(m.record), level="TRACE")
    yield captured
    logger.remove(sink_id)


def context(job_id: uuid.UUID | None = None) -> JobLoggerContext:
    return JobLoggerContext(
        job_id=job_id or uuid.uuid4(), target="billing.jobs:charge", attempt=2, node_id="n1"
    )


class RecordingAuditStore:
    """Counts append_logs round trips; the batching contract cannot be observed on a real
    store without instrumenting its driver."""

    def __init__(self, fail: bool = False) -> None:
        self.batches: list[list[JobLogLine]] = []
        self.fail = fail

    def capability(self, kind: type[Any]) -> Any:
        return self if kind is JobAuditStore else None

    def save_execution(self, record: Any) -> None:
        pass

    def find_executions_by_job_id(self, job_id: uuid.UUID) -> list[Any]:
        return []

    def append_logs(self, lines: Sequence[JobLogLine]) -> None:
        if self.fail:
            raise ConnectionError("store down")
        self.batches.append(list(lines))

    def find_logs_by_job_id(self, job_id: uuid.UUID, limit: int = 1000) -> list[JobLogLine]:
        return [line for batch in self.batches for line in batch][:limit]


def test_lines_go_to_loguru_with_job_context_bound(records: list[dict[str, Any]]) -> None:
    ctx = context()
    job_logger = LoguruJobLoggerFactory(store=None).create(ctx)
    job_logger.info("charging")
    job_logger.error("declined")
    mine = [r for r in records if r["extra"].get("job_id") == str(ctx.job_id)]
    assert [(r["level"].name, r["message"]) for r in mine] == [
        ("INFO", "charging"),
        ("ERROR", "declined"),
    ]
    assert mine[0]["extra"]["attempt"] == 2
    assert mine[0]["extra"]["target"] == "billing.jobs:charge"


def test_store_without_audit_capability_stores_nothing() -> None:
    class NoAudit:
        def capability(self, kind: type[Any]) -> None:
            return None

    factory = LoguruJobLoggerFactory(store=NoAudit())
    assert not factory.stores_logs
    job_logger = factory.create(context())
    job_logger.info("x")
    assert job_logger.pending == 0


def test_lines_are_buffered_and_written_in_one_round_trip_on_close() -> None:
    store = RecordingAuditStore()
    ctx = context()
    job_logger = LoguruJobLoggerFactory(store=store).create(ctx)
    for i in range(10):
        job_logger.debug(f"step {i}")
    assert store.batches == []
    job_logger.close()
    assert len(store.batches) == 1
    assert [line.message for line in store.batches[0]] == [f"step {i}" for i in range(10)]
    assert all(line.attempt == 2 and line.job_id == ctx.job_id for line in store.batches[0])
    assert store.batches[0][0].level is LogLevel.DEBUG
    job_logger.info("after close")
    job_logger.close()
    assert len(store.batches) == 1


def test_full_buffer_flushes_early() -> None:
    store = RecordingAuditStore()
    job_logger = LoguruJobLoggerFactory(store=store, buffer_size=3).create(context())
    for i in range(7):
        job_logger.info(str(i))
    assert [len(b) for b in store.batches] == [3, 3]
    job_logger.flush()
    assert [len(b) for b in store.batches] == [3, 3, 1]


def test_store_failure_while_flushing_does_not_raise(records: list[dict[str, Any]]) -> None:
    job_logger = LoguruJobLoggerFactory(store=RecordingAuditStore(fail=True)).create(context())
    job_logger.warn("hello")
    job_logger.close()
    assert any("could not store 1 job log lines" in r["message"] for r in records)


def test_logs_are_stored_in_a_real_sqlite_store(tmp_path: Path) -> None:
    pytest.importorskip("ratchet_store_sql", reason="needs the ratchet-store-sql distribution")
    container = create_container(
        {
            "store.url": f"sqlite:///{tmp_path / 'logs.db'}",
            "store.auto_migrate": "true",
            "alternatives.entry_points": "false",
        }
    )
    container.build()
    store = container.job_store()
    audit = store.capability(JobAuditStore)
    assert audit is not None, "the SQL store advertises JobAuditStore"
    job_id = uuid.uuid4()
    with container.job_logger_factory().create(context(job_id)) as job_logger:
        job_logger.info("first")
        job_logger.warn("second")
    lines = audit.find_logs_by_job_id(job_id)
    assert [(line.level, line.message) for line in lines] == [
        (LogLevel.INFO, "first"),
        (LogLevel.WARNING, "second"),
    ]
