"""The fixture protocol a store author implements to run the TCK against a store."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, runtime_checkable

import attrs

from ratchet_api.ids import uuid7
from ratchet_api.model import JobStatus, JobType
from ratchet_api.store.entities import JobEntity
from ratchet_api.store.protocols import JobStore

SAMPLE_TARGET = "ratchet_tck.sample:noop"
"""The target written on TCK jobs (stores never import it)."""


def now_ms() -> datetime:
    """The caller's clock as aware UTC, truncated to milliseconds (what every store keeps)."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


@runtime_checkable
class StoreTransaction(Protocol):
    """A begun transaction of the store's database, as an application holds one."""

    @property
    def handle(self) -> object:
        """What the application passes to ``store.joined(...)`` (a SQLAlchemy ``Connection``,
        a pymongo ``ClientSession``)."""
        ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...


@runtime_checkable
class StoreFixture(Protocol):
    """What the contracts need from a store author (the pytest fixture ``tck_fixture``)."""

    def store(self) -> JobStore:
        """The store under test, schema ready, empty at the start of each test."""
        ...

    def new_pending_job(self, **overrides: Any) -> JobEntity:
        """A valid PENDING job not yet inserted: unique id, a unique tag ``tck-<hex>``, due now.
        ``overrides`` are applied with ``attrs.evolve``."""
        ...

    def new_batch_parent_job(self) -> JobEntity:
        """Like ``new_pending_job`` with ``job_type=JobType.BATCH_PARENT``."""
        ...

    def cleanup_store(self) -> None:
        """Remove every row or document the tests wrote (the TCK calls it after each test)."""
        ...

    def store_factory(self) -> Callable[[], JobStore] | None:
        """A picklable zero-argument callable (a module-level function or a
        ``functools.partial`` of one) that opens a new store on the same database in another
        process, for the multi-process claim tests; None for a process-local store (those tests
        then skip, saying so)."""
        ...


class BaseStoreFixture:
    """Implements the job factories; a store author writes ``store``, ``cleanup_store`` and
    (optionally) ``store_factory``."""

    def store(self) -> JobStore:
        raise NotImplementedError(f"{type(self).__name__} must implement store()")

    def cleanup_store(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement cleanup_store()")

    def store_factory(self) -> Callable[[], JobStore] | None:
        return None

    def begin_transaction(self) -> StoreTransaction | None:
        """Optional (read with ``getattr``: fixtures written before it still work): a begun
        transaction of the store's database that ``store.joined(handle)`` accepts, for
        ``JobStoreJoinedContract``; None (the default) for a store that cannot join callers'
        transactions."""
        return None

    def new_pending_job(self, **overrides: Any) -> JobEntity:
        now = now_ms()
        job = JobEntity(
            id=uuid7(),
            status=JobStatus.PENDING,
            target=SAMPLE_TARGET,
            payload='{"args": [], "kwargs": {}}',
            # due one second ago, so a store clock a little behind the caller's still sees it due
            scheduled_at=now - timedelta(seconds=1),
            created_at=now,
            updated_at=now,
            tags=(f"tck-{uuid.uuid4().hex[:16]}",),
        )
        return attrs.evolve(job, **overrides) if overrides else job

    def new_batch_parent_job(self) -> JobEntity:
        return self.new_pending_job(job_type=JobType.BATCH_PARENT)


__all__ = ["SAMPLE_TARGET", "BaseStoreFixture", "StoreFixture", "StoreTransaction", "now_ms"]
