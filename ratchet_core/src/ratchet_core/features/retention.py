"""Retention: finished jobs move to the archive, old archived jobs and dead letters are deleted.

A sweep (:meth:`Retention.sweep`) runs three steps, each in batches of ``retention.batch_size``
jobs, one store transaction per batch (so no lock is held for long and running jobs are never
touched: only terminal jobs qualify):

1. SUCCEEDED, FAILED (dead letters) and CANCELLED jobs finished longer ago than
   ``retention.succeeded`` / ``retention.failed`` / ``retention.cancelled`` move to the archive
   (``ArchiveStore.archive_finished_before`` with the status);
2. archived jobs finished longer ago than ``retention.archive`` are deleted with their executions
   and logs (``ArchiveStore.delete_archived_before``);
3. dead letters still in the jobs table (a store without ``ArchiveStore``, or
   ``retention.failed = never`` with archiving off) finished longer ago than
   ``retention.failed`` + ``retention.archive`` are deleted (``delete_dead_letter_older_than``).

Every age is measured from the job's ``finished_at`` on the store's clock. ``never`` (or
``off``) as a value keeps those jobs forever.

On a store keeping the history in time partitions (:class:`PartitionedHistory`: PostgreSQL
from migration 0013), the archive cutoff is first rounded down to the partition width (a UTC
day) and every partition wholly older than it is dropped (``maintain_history``, which also
creates the partitions of the coming days): step 2 then finds only the rows outside the daily
partitions. Archived jobs are so kept up to one partition width longer than
``retention.archive``, and leave with one ``DROP TABLE`` per day instead of a ``DELETE`` each.

Workers run the sweep every ``retention.interval`` from their maintenance thread under the
store lease ``ratchet.startup.retention`` (one node at a time), a time-boxed slice per tick so
heartbeats are never held up; ``ratchet jobs purge`` runs a whole sweep once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Protocol, runtime_checkable

import attrs

from ratchet_api.model import JobStatus
from ratchet_api.spi.runtime import RatchetConfig, RatchetConfigKey, StartupCoordinator
from ratchet_api.store.protocols import ArchiveStore, JobStore
from ratchet_core.runtime.config import parse_bool, parse_duration, parse_int, register_key

_log = logging.getLogger("ratchet.retention")

RETENTION_ACTION = "retention"
NEVER_WORDS = frozenset({"never", "off", "forever", "none"})


def parse_retention(raw: str) -> timedelta | None:
    """A duration (``7d``, ``12h``, ``3600``) or ``never``/``off`` (keep forever: None)."""
    text = raw.strip().lower()
    if text in NEVER_WORDS:
        return None
    try:
        return parse_duration(text)
    except ValueError:
        raise ValueError(
            f"expected a duration such as 7d, 12h or 30m, or 'never', got {raw!r}"
        ) from None


RETENTION_ENABLED = register_key(
    RatchetConfigKey(
        "retention.enabled",
        parse_bool,
        True,
        "Workers archive and delete old finished jobs by the retention.* ages (false: only "
        "`ratchet jobs purge` does).",
    )
)
RETENTION_SUCCEEDED: RatchetConfigKey[timedelta | None] = register_key(
    RatchetConfigKey(
        "retention.succeeded",
        parse_retention,
        timedelta(days=7),
        "SUCCEEDED jobs move to the archive this long after they finished (never: stay).",
    )
)
RETENTION_FAILED: RatchetConfigKey[timedelta | None] = register_key(
    RatchetConfigKey(
        "retention.failed",
        parse_retention,
        timedelta(days=30),
        "FAILED jobs (the dead letter) move to the archive this long after they failed (never: "
        "stay until retried or deleted).",
    )
)
RETENTION_CANCELLED: RatchetConfigKey[timedelta | None] = register_key(
    RatchetConfigKey(
        "retention.cancelled",
        parse_retention,
        timedelta(days=7),
        "CANCELLED jobs move to the archive this long after they were cancelled (never: stay).",
    )
)
RETENTION_ARCHIVE: RatchetConfigKey[timedelta | None] = register_key(
    RatchetConfigKey(
        "retention.archive",
        parse_retention,
        timedelta(days=90),
        "Archived jobs are deleted (with their executions and logs) this long after they "
        "finished; dead letters left in the jobs table are deleted retention.failed + this "
        "long after they failed (never: keep forever).",
    )
)
RETENTION_INTERVAL = register_key(
    RatchetConfigKey(
        "retention.interval",
        parse_duration,
        timedelta(minutes=1),
        "How often a worker runs a retention sweep (under a store lease: one node at a time).",
    )
)
RETENTION_BATCH_SIZE = register_key(
    RatchetConfigKey(
        "retention.batch_size",
        parse_int(1, 10_000),
        500,
        "Jobs archived or deleted per store transaction (smaller: shorter locks).",
    )
)

ARCHIVED_STATUSES = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@runtime_checkable
class PartitionedHistory(Protocol):
    """A store keeping archived jobs and execution records in time partitions (the SQL store
    on PostgreSQL): retention drops whole partitions instead of deleting rows."""

    @property
    def history_partition_interval(self) -> timedelta | None:
        """The width of one partition, or None when the history is not partitioned."""
        ...

    def maintain_history(self, cutoff: datetime | None, now: datetime | None = None) -> int:
        """Create the coming partitions; drop those ending at or before ``cutoff``. Returns
        the number of archived jobs dropped."""
        ...


def align_down(at: datetime, interval: timedelta) -> datetime:
    """``at`` rounded down to a multiple of ``interval`` since the Unix epoch (UTC)."""
    return _EPOCH + ((at - _EPOCH) // interval) * interval


@attrs.frozen(kw_only=True)
class RetentionPolicy:
    """How long finished jobs are kept; None keeps them forever."""

    succeeded: timedelta | None = timedelta(days=7)
    failed: timedelta | None = timedelta(days=30)
    cancelled: timedelta | None = timedelta(days=7)
    archive: timedelta | None = timedelta(days=90)
    batch_size: int = attrs.field(default=500, validator=attrs.validators.ge(1))

    @classmethod
    def from_config(cls, settings: RatchetConfig) -> RetentionPolicy:
        return cls(
            succeeded=settings.get(RETENTION_SUCCEEDED),
            failed=settings.get(RETENTION_FAILED),
            cancelled=settings.get(RETENTION_CANCELLED),
            archive=settings.get(RETENTION_ARCHIVE),
            batch_size=settings.get(RETENTION_BATCH_SIZE),
        )

    def keep(self, status: JobStatus) -> timedelta | None:
        """How long a job finished in ``status`` stays in the jobs table."""
        return {
            JobStatus.SUCCEEDED: self.succeeded,
            JobStatus.FAILED: self.failed,
            JobStatus.CANCELLED: self.cancelled,
        }[status]


@attrs.define
class RetentionReport:
    """What a sweep did."""

    archived: dict[JobStatus, int] = attrs.field(factory=dict)
    archive_deleted: int = 0
    dead_letters_deleted: int = 0
    complete: bool = True
    """False when the sweep stopped at its deadline with work left."""

    @property
    def total(self) -> int:
        return sum(self.archived.values()) + self.archive_deleted + self.dead_letters_deleted

    def add(self, other: RetentionReport) -> None:
        for status, n in other.archived.items():
            self.archived[status] = self.archived.get(status, 0) + n
        self.archive_deleted += other.archive_deleted
        self.dead_letters_deleted += other.dead_letters_deleted
        self.complete = other.complete


class Retention:
    """Applies a :class:`RetentionPolicy` to a store. Thread safe (holds no state)."""

    def __init__(self, store: JobStore, policy: RetentionPolicy) -> None:
        self._store = store
        self._archive = store.capability(ArchiveStore)
        self._history = store.capability(PartitionedHistory)
        self.policy = policy

    @property
    def archives(self) -> bool:
        """True when the store has the ``ArchiveStore`` capability."""
        return self._archive is not None

    def sweep(self, deadline: float | None = None) -> RetentionReport:
        """Run every step until nothing is left or ``time.monotonic()`` passes ``deadline``
        (checked between batches). Store errors propagate."""
        report = RetentionReport()
        limit = self.policy.batch_size
        for step in self._steps(self._store.server_now(), limit):
            total = 0
            while True:
                if deadline is not None and time.monotonic() >= deadline:
                    report.complete = False
                    return report
                n = step.batch()
                total += n
                if n < limit:
                    break
            step.record(report, total)
        return report

    def _steps(self, now: datetime, limit: int) -> list[_Step]:
        """The sweep's steps, in order, for the policy and the store's capabilities."""
        policy = self.policy
        archive = self._archive
        steps: list[_Step] = []
        if archive is not None:
            for status in ARCHIVED_STATUSES:
                keep = policy.keep(status)
                if keep is not None:
                    batch = partial(archive.archive_finished_before, now - keep, limit, [status])
                    steps.append(_Step(batch, partial(_record_archived, status)))
        history = self._history
        interval = history.history_partition_interval if history is not None else None
        cutoff = None if policy.archive is None else now - policy.archive
        if history is not None and interval is not None and archive is not None:
            if cutoff is not None:
                cutoff = align_down(cutoff, interval)
            batch = partial(history.maintain_history, cutoff, now)
            steps.append(_Step(batch, _record_archive_deleted))
        if policy.archive is None or cutoff is None:
            return steps
        if archive is not None:
            batch = partial(archive.delete_archived_before, cutoff, limit)
            steps.append(_Step(batch, _record_archive_deleted))
        if policy.failed is not None:
            cutoff = now - (policy.failed + policy.archive)
            batch = partial(self._store.delete_dead_letter_older_than, cutoff, limit)
            steps.append(_Step(batch, _record_dead_letters_deleted))
        return steps


@attrs.frozen
class _Step:
    """One step of a sweep: ``batch`` archives or deletes up to ``retention.batch_size`` jobs and
    returns how many; ``record`` puts the step's total into the report once it is done."""

    batch: Callable[[], int]
    record: Callable[[RetentionReport, int], None]


def _record_archived(status: JobStatus, report: RetentionReport, n: int) -> None:
    if n:
        report.archived[status] = n


def _record_archive_deleted(report: RetentionReport, n: int) -> None:
    report.archive_deleted += n


def _record_dead_letters_deleted(report: RetentionReport, n: int) -> None:
    report.dead_letters_deleted = n


class RetentionTask:
    """The worker's periodic retention sweep (a maintenance task, see
    :mod:`ratchet_core.worker.maintenance`): every ``retention.interval`` one node takes the
    lease and sweeps for at most ``budget`` seconds per call; with work left it asks to be
    called again at once (after the maintenance thread's heartbeat is due-checked)."""

    def __init__(
        self,
        retention: Retention,
        startup: StartupCoordinator,
        *,
        interval: timedelta,
        budget: float = 1.0,
        on_swept: Callable[[RetentionReport], None] | None = None,
    ) -> None:
        self._retention = retention
        self._startup = startup
        self.interval = interval.total_seconds()
        self._budget = budget
        self._on_swept = on_swept
        self._lease = max(timedelta(minutes=1), timedelta(seconds=budget * 10))
        self._warned_no_archive = False

    @classmethod
    def from_config(
        cls, store: JobStore, settings: RatchetConfig, startup: StartupCoordinator
    ) -> RetentionTask | None:
        """The task configured by ``retention.*``, or None when ``retention.enabled`` is off."""
        if not settings.get(RETENTION_ENABLED):
            return None
        return cls(
            Retention(store, RetentionPolicy.from_config(settings)),
            startup,
            interval=settings.get(RETENTION_INTERVAL),
        )

    def run(self) -> bool:
        """One time-boxed slice; True when work is left (call again soon). Never raises."""
        if not self._retention.archives and not self._warned_no_archive:
            self._warned_no_archive = True
            _log.warning(
                "the store has no ArchiveStore capability: retention only deletes old dead "
                "letters; succeeded and cancelled jobs stay in the jobs table"
            )
        try:
            if not self._startup.try_acquire(RETENTION_ACTION, self._lease):
                return False
        except Exception:  # noqa: BLE001 - try again next interval
            _log.warning("retention lease could not be taken", exc_info=True)
            return False
        try:
            report = self._retention.sweep(deadline=time.monotonic() + self._budget)
        except Exception:  # noqa: BLE001 - try again next interval
            _log.warning("retention sweep failed", exc_info=True)
            return False
        finally:
            try:
                self._startup.release(RETENTION_ACTION)
            except Exception:  # noqa: BLE001 - the lease expires on its own
                _log.debug("releasing the retention lease failed", exc_info=True)
        if report.total:
            _log.info(
                "retention: archived %s, deleted %d archived job(s) and %d dead letter(s)",
                {s.value: n for s, n in report.archived.items()} or 0,
                report.archive_deleted,
                report.dead_letters_deleted,
            )
        if self._on_swept is not None:
            self._on_swept(report)
        return not report.complete


__all__ = [
    "RETENTION_ACTION",
    "RETENTION_ARCHIVE",
    "RETENTION_BATCH_SIZE",
    "RETENTION_CANCELLED",
    "RETENTION_ENABLED",
    "RETENTION_FAILED",
    "RETENTION_INTERVAL",
    "RETENTION_SUCCEEDED",
    "PartitionedHistory",
    "Retention",
    "align_down",
    "RetentionPolicy",
    "RetentionReport",
    "RetentionTask",
    "parse_retention",
]
