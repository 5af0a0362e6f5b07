"""Worker metrics emitted on the real path, asserted on a real UDP socket with the statsd
backend (issue 15): success finalization (retried, minimal, stuck), the poller breaker, claim
failures and the execution-target fallback.

The store is the real SQLite store; only the completion writes or claims of one scenario fail,
as a dropped connection (``TransientStoreError``) or a refused value (``StoreDataError``)
would make them fail.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any
from uuid import UUID

from dependency_injector import providers

from ratchet_api.errors import StoreDataError, TransientStoreError
from ratchet_api.model import JobStatus
from ratchet_api.store.entities import Completion
from ratchet_api.store.protocols import WorkerBatchStore
from tests.engine import targets
from tests.engine.conftest import build_container, migrate
from tests.engine.test_metrics_statsd import received, udp  # noqa: F401 - the fixture


class _Failing:
    """The real store; ``batch_failures`` next ``mark_succeeded_many`` calls raise
    ``batch_error``, ``single_error`` (when set) fails ``mark_succeeded`` (``with_result_only``:
    only when a result is written)."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.batch_failures = 0
        self.batch_error: Exception = TransientStoreError("connection lost")
        self.single_error: Exception | None = None
        self.with_result_only = False

    def mark_succeeded_many(self, completions: Sequence[Completion]) -> set[UUID]:
        if self.batch_failures:
            self.batch_failures -= 1
            raise self.batch_error
        return self._real.mark_succeeded_many(completions)  # type: ignore[no-any-return]

    def mark_succeeded(self, job_id: UUID, claim_seq: int, result: str | None) -> bool:
        if self.single_error is not None and (result is not None or not self.with_result_only):
            raise self.single_error
        return self._real.mark_succeeded(job_id, claim_seq, result)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _names(lines: list[str]) -> set[str]:
    return {line.split(":", 1)[0] for line in lines}


def _run(container: Any, failing: _Failing, make_worker: Any, **settings: Any) -> Any:
    with container.job_store.override(providers.Object(failing)):
        return make_worker(container, **settings).run_until_idle(30)


def _container(url: str, sock: socket.socket, **more: str) -> Any:
    container = build_container(
        url, **{"metrics.backend": "statsd", "metrics.statsd.port": sock.getsockname()[1], **more}
    )
    migrate(container.job_store())
    return container


def test_finalization_retried_and_minimal_are_emitted(
    sqlite_url: str,
    udp: socket.socket,  # noqa: F811
    make_worker: Any,
) -> None:
    container = _container(sqlite_url, udp)
    store = container.job_store()
    failing = _Failing(store)
    retried = container.scheduler().enqueue(targets.add, 1, 2)
    failing.batch_failures = 1
    assert _run(container, failing, make_worker).succeeded == 1
    assert "ratchet.jobs.finalization,type=STANDARD,outcome=retried" in _names(received(udp))

    minimal = container.scheduler().enqueue(targets.add, 2, 2)
    failing.batch_failures = 100
    failing.batch_error = StoreDataError("result", "value too long for the column")
    failing.single_error = StoreDataError("result", "value too long for the column")
    failing.with_result_only = True
    assert _run(container, failing, make_worker).succeeded == 1
    assert "ratchet.jobs.finalization,type=STANDARD,outcome=minimal" in _names(received(udp))
    for job_id, result in ((retried, "3"), (minimal, None)):
        job = store.find_by_id(job_id)
        assert job is not None and job.status is JobStatus.SUCCEEDED and job.result == result
    store.close()


def test_a_stuck_success_is_reported_and_recovered_by_the_stale_job_sweep(
    sqlite_url: str,
    udp: socket.socket,  # noqa: F811
    make_worker: Any,
) -> None:
    container = _container(sqlite_url, udp)
    store = container.job_store()
    failing = _Failing(store)
    job_id = container.scheduler().job(targets.add).args(1, 1).max_retries(3).enqueue()
    failing.batch_failures = 10**6
    failing.single_error = TransientStoreError("connection lost")
    with container.job_store.override(providers.Object(failing)):
        worker = make_worker(container, node_timeout=timedelta(seconds=1))
        worker.start()
        lines = received(udp, until=lambda got: any("outcome=stuck" in g for g in got), timeout=30)
        assert "ratchet.jobs.finalization,type=STANDARD,outcome=stuck" in _names(lines)
        failing.batch_failures = 0
        failing.single_error = None
        # No longer heartbeated: the stale-job sweep puts it back and it runs again.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            job = store.find_by_id(job_id)
            if job is not None and job.status is JobStatus.SUCCEEDED:
                break
            time.sleep(0.05)
        worker.stop(timeout=5)
    job = store.find_by_id(job_id)
    assert job is not None and job.status is JobStatus.SUCCEEDED and job.attempt == 2
    assert worker.stats.recovered >= 1
    store.close()


def test_poller_breaker_claim_failures_and_target_fallback_are_emitted(
    sqlite_url: str,
    udp: socket.socket,  # noqa: F811
    make_worker: Any,
) -> None:
    container = _container(
        sqlite_url,
        udp,
        **{
            "circuit_breaker.poller.minimum_calls": "2",
            "circuit_breaker.poller.sliding_window_size": "2",
            "circuit_breaker.poller.wait_duration": "300ms",
        },
    )
    store = container.job_store()
    container.scheduler().job(targets.add).args(5, 5).execution_target("tests-label").enqueue()
    assert _run(container, _Failing(store), make_worker).succeeded == 1
    names = _names(received(udp))
    assert "ratchet.execution_targets.fallback,requested=tests-label,used=default" in names

    class _ClaimsFail(_Failing):
        # both claim paths fail: the plain one and WorkerBatchStore's (claim and start marks)
        def claim_next_batch(self, *args: Any, **kwargs: Any) -> Any:
            raise TransientStoreError("connection lost")

        def claim_and_start(self, *args: Any, **kwargs: Any) -> Any:
            raise TransientStoreError("connection lost")

        def capability(self, kind: type) -> Any:
            found = self._real.capability(kind)
            return self if found is not None and kind is WorkerBatchStore else found

    with container.job_store.override(providers.Object(_ClaimsFail(store))):
        worker = make_worker(container)
        worker.start()
        lines = received(
            udp, until=lambda got: any("state=HALF_OPEN" in g for g in got), timeout=10
        )
        worker.stop(timeout=5)
    names = _names(lines)
    assert "ratchet.claims.transient_failures,reason=TransientStoreError" in names
    assert f"ratchet.poller.breaker.transitions,poller={worker.node_id},state=OPEN" in names
    assert f"ratchet.poller.breaker.transitions,poller={worker.node_id},state=HALF_OPEN" in names
    store.close()


class _NoHooks:
    """An AfterCommitRegistrar that cannot hook any transaction."""

    def register_after_commit(self, action: Any, transaction: object | None = None) -> Any:
        from ratchet_api.spi.runtime import AfterCommitResult

        return AfterCommitResult.REGISTRATION_FAILED


def test_a_failed_after_commit_registration_is_a_warning_with_the_job_id_and_a_metric(
    sqlite_url: str,
    udp: socket.socket,  # noqa: F811
) -> None:
    import sqlalchemy as sa
    from loguru import logger

    container = _container(sqlite_url, udp)
    warnings: list[str] = []
    sink = logger.add(warnings.append, level="WARNING", format="{message}")
    app_engine = sa.create_engine(sqlite_url)
    try:
        with container.after_commit_registrar.override(providers.Object(_NoHooks())):
            scheduler = container.scheduler()
            with app_engine.connect() as conn:
                conn.begin()
                job_id = scheduler.job(targets.add).args(1, 2).transaction(conn).enqueue()
                conn.commit()
    finally:
        logger.remove(sink)
        app_engine.dispose()
    assert any(str(job_id) in w and "after-commit" in w for w in warnings), warnings
    assert "ratchet.wakeups.local,reason=after_commit_unavailable" in _names(received(udp))
    container.job_store().close()
