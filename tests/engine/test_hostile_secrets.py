"""No secret reaches a sink (issue 26): an error whose message and chained cause carry
credentials of each kind, and a job that writes them through ``ctx.logger``, leave none of them
in the stored error, the execution records, the job log or the worker's log output; a job
raising a 1 MB message fails in one attempt while the worker keeps running other jobs; size
limits refuse with their key's name. SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loguru import logger as loguru

from ratchet_api.errors import LimitExceededError
from ratchet_api.model import JobStatus
from ratchet_api.store.protocols import JobAuditStore
from tests.conftest import backend_url
from tests.engine import hostile_targets
from tests.engine.conftest import build_container, migrate
from tests.engine.worker_fixtures import wait_for


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest) -> str:
    return backend_url(request, request.param)


def container_for(store_url: str, **settings: Any) -> Any:
    made = build_container(store_url, **settings)
    migrate(made.job_store())
    return made


@pytest.fixture
def container(store_url: str) -> Iterator[Any]:
    made = container_for(store_url)
    try:
        yield made
    finally:
        made.job_store().close()


def secrets_of_every_kind(u: str) -> dict[str, str]:
    """kind -> (text embedding the secret, the secret part that must not appear anywhere)."""
    return {
        "url password with @ and /": f"postgresql://app:p@ss/{u}@db.internal/prod",
        "DB_PASSWORD": f"DB_PASSWORD=db{u}pw",
        "PGPASSWORD": f"PGPASSWORD='pg{u}pw'",
        "AWS access key": f"AKIA{u.upper()}{u.upper()}",
        "AWS secret key": f"wJalrXUtnFEMI/K7MDENG/bPxRfiCY{u}Ab",
        "JWT": f"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ{u}In0.c2ln{u}",
        "card spaced": "4111 1111 1111 1111",
        "card plain": "5500005555555559",
        "Stripe key": f"sk_live_{u}{u}Zz",
        "PEM private key": f"-----BEGIN PRIVATE KEY-----\nMIIE{u}\n-----END PRIVATE KEY-----",
    }


def must_not_appear(u: str) -> list[str]:
    return [u, u.upper(), "4111 1111 1111 1111", "5500005555555559", "MIIE"]


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


class _Joined(list[str]):
    def __init__(self, *parts: list[str]) -> None:
        super().__init__()
        self.parts = parts

    def text(self) -> str:
        return "\n".join(line for part in self.parts for line in part)


@pytest.fixture
def worker_output() -> Iterator[_Joined]:
    """Everything the worker logs (standard logging, traceback text included) and every line
    the job logger prints (loguru)."""
    handler = Captured()
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    printed: list[str] = []
    sink = loguru.add(lambda message: printed.append(str(message)), level="TRACE")
    try:
        yield _Joined(handler.lines, printed)
    finally:
        loguru.remove(sink)
        root.removeHandler(handler)
        root.setLevel(previous)


def test_no_secret_reaches_any_sink(container: Any, make_worker: Any, worker_output: Any) -> None:
    u = uuid.uuid4().hex[:8]
    kinds = secrets_of_every_kind(u)
    inner = " ; ".join(list(kinds.values())[:5])
    outer = " ; ".join(list(kinds.values())[5:])
    scheduler = container.scheduler()
    failed = (
        scheduler.job(hostile_targets.raise_chained).args(inner, outer).max_retries(0).enqueue()
    )
    logged = scheduler.enqueue(hostile_targets.log_line, " | ".join(kinds.values()))
    make_worker(container).run_until_idle(30)

    result = scheduler.result(failed)
    assert result.status is JobStatus.FAILED
    assert scheduler.result(logged).status is JobStatus.SUCCEEDED
    audit = container.job_store().capability(JobAuditStore)
    assert audit is not None
    executions = audit.find_executions_by_job_id(failed)
    assert executions and executions[-1].traceback
    trace = executions[-1].traceback
    assert "ValueError" in trace and "direct cause" in trace  # the chain is kept, sanitized
    job_log = [line.message for line in audit.find_logs_by_job_id(logged)]
    assert job_log
    sinks = {
        "last_error": str(result.error),
        "execution error": "\n".join(str(e.error) for e in executions),
        "execution traceback": "\n".join(str(e.traceback) for e in executions),
        "job log": "\n".join(job_log),
        "worker output": worker_output.text(),
    }
    for sink, text in sinks.items():
        assert "***" in text or sink == "worker output", sink
        for secret in must_not_appear(u):
            assert secret not in text, f"{secret!r} reached the {sink}:\n{text}"
    assert "db.internal/prod" in trace  # what is not secret stays readable


def test_a_one_megabyte_error_fails_its_job_while_others_keep_running(
    container: Any, start_workers: Any
) -> None:
    u = uuid.uuid4().hex
    scheduler = container.scheduler()
    big = scheduler.job(hostile_targets.raise_big).args(1_000_000, u).max_retries(0).enqueue()
    others = [scheduler.enqueue(hostile_targets.echo, i) for i in range(6)]
    start_workers(container, 1, concurrency=2, prefetch=2)

    def finished() -> bool:
        states = [scheduler.get(job_id).status for job_id in (big, *others)]
        return all(s in (JobStatus.SUCCEEDED, JobStatus.FAILED) for s in states)

    wait_for(finished, 120, "the big failure and the other jobs to finish")
    job = container.job_store().find_by_id(big)
    assert job.status is JobStatus.FAILED
    assert job.attempt == 1  # failed once: never recovered from a node declared dead
    error = str(scheduler.result(big).error)
    assert len(error) <= 2000 and error.endswith("[truncated]") and u not in error
    assert [scheduler.result(i).value for i in others] == list(range(6))


def test_a_result_over_the_limit_fails_naming_the_limit(store_url: str, make_worker: Any) -> None:
    made = container_for(store_url, **{"limits.max_result_bytes": "1000"})
    try:
        scheduler = made.scheduler()
        small = scheduler.enqueue(hostile_targets.big_result, 900)
        large = scheduler.job(hostile_targets.big_result).args(5000).max_retries(0).enqueue()
        make_worker(made).run_until_idle(30)
        assert scheduler.result(small).status is JobStatus.SUCCEEDED
        failure = scheduler.result(large)
        assert failure.status is JobStatus.FAILED and failure.value is None
        assert "LimitExceededError" in str(failure.error)
        assert "limits.max_result_bytes" in str(failure.error)
    finally:
        made.job_store().close()


def test_a_payload_over_the_limit_is_refused_at_enqueue_naming_the_limit(
    store_url: str,
) -> None:
    made = container_for(store_url, **{"limits.max_payload_bytes": "10000"})
    try:
        scheduler = made.scheduler()
        scheduler.enqueue(hostile_targets.echo, "x" * 9000)
        with pytest.raises(LimitExceededError, match=r"limits\.max_payload_bytes") as info:
            scheduler.enqueue(hostile_targets.echo, "x" * 20_000)
        assert info.value.limit == "limits.max_payload_bytes" and info.value.maximum == 10_000
        with pytest.raises(LimitExceededError, match=r"item 1: .*limits\.max_payload_bytes"):
            scheduler.enqueue_many(hostile_targets.echo, [("a",), ("x" * 20_000,)])
    finally:
        made.job_store().close()


def test_job_log_lines_beyond_the_limit_are_not_stored(store_url: str, make_worker: Any) -> None:
    made = container_for(store_url, **{"limits.max_job_log_lines": "50"})
    try:
        job_id = made.scheduler().enqueue(hostile_targets.log_lines, 500)
        make_worker(made).run_until_idle(30)
        assert made.scheduler().result(job_id).status is JobStatus.SUCCEEDED
        audit = made.job_store().capability(JobAuditStore)
        assert audit is not None
        lines = [line.message for line in audit.find_logs_by_job_id(job_id, limit=10_000)]
        assert lines[:50] == [f"line {i}" for i in range(50)]
        assert len(lines) == 51 and "limits.max_job_log_lines = 50" in lines[-1]
    finally:
        made.job_store().close()


def test_every_default_limit_is_documented() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    for key in ("limits.max_payload_bytes", "limits.max_result_bytes", "limits.max_job_log_lines"):
        assert f"`{key}`" in doc


def test_an_error_message_with_a_nul_byte_still_fails_the_job(
    container: Any, make_worker: Any
) -> None:
    # PostgreSQL refuses a NUL in text: the failure write (batched, then job by job) was
    # refused and the job stayed RUNNING until recovery, which ran it again, for ever
    scheduler = container.scheduler()
    failed = scheduler.job(hostile_targets.raise_message).args("a\x00b").max_retries(0).enqueue()
    make_worker(container).run_until_idle(30)
    result = scheduler.result(failed)
    assert result.status is JobStatus.FAILED
    assert "a" in str(result.error) and "b" in str(result.error)
