"""The engine side of the store SPI version (``ratchet_api.store.versions``).

``adapt_store`` is applied to every store the engine opens (``ratchet_core.runtime.stores.open_store``):

* a store of another major version than ``STORE_SPI`` is refused with ``StoreSpiVersionError``
  naming both versions and the migration guide;
* a store at the current version (or a newer minor one) is returned unchanged;
* a store at an older minor version is wrapped in ``SpiCompatStore``, which presents the current
  SPI to the engine (the worker always sees today's protocols) and supplies each method the
  store lacks with a fallback that keeps the guarantees of the store's version. What a fallback
  cannot provide is named once in the log and by ``ratchet health`` (``SpiStatus.disabled``).

The fallbacks for a 1.0 store (``docs/stores/changelog.md`` has the reasoning):

* ``mark_dispatched``: every claim counts as started (1.0 counted every claim's attempt); the
  claims still current are read back with ``find_by_id`` so a superseded one is not run;
  ``find_stale_running_jobs`` reports ``dispatched_at = started_at`` so recovery takes its
  counted path;
* ``reset_orphan_jobs(node_ids, heartbeat_before)``: node heartbeats are re-read just before
  the 1.0 reset, nodes that heartbeat since the cutoff are spared (the 1.0 race is narrowed,
  not closed);
* ``release_claim(run_at=...)``: fenced ``schedule_retry`` due at ``run_at`` (attempt counted,
  as 1.0 workers did for an open circuit); ``release_claim(unless_dispatched=True)``: refused;
* ``settle_children``: no fallback keeps its all-or-none guarantee, so ``WorkflowConditionStore``
  is not advertised and workflows with steps are refused at enqueue;
* priorities are rounded to the nearest named ``JobPriority`` before the store sees them;
* a capability whose protocol grew since the store's version is advertised only if the store's
  object has every method of today's protocol (``RecurringJobStore`` without
  ``advance_next_fire_many`` gets a per-definition fallback).

An optional capability new in a minor version needs no adapter: an older store does not
advertise it and the engine reads through its own fallback. ``QueueStatsStore`` (third wave):
``ratchet_core.observability.queues.read_queue_stats`` scans the newest jobs through
``JobQueryStore`` instead (``QueueStats.exact`` False). ``FairClaimStore`` (third wave): the
enqueue pipeline says once that jobs with a ``fairness_key`` are claimed in the plain order
(a 1.0 store also drops the key: ``JobEntity.fairness_key`` is reported disabled above).
``SealedArchiveStore`` (third wave): ``ratchet_core.payload.rotation`` rotates and counts live
jobs only and reports the archive as not covered (``RotationReport.archive_covered`` False).
``WorkerBatchStore`` (third wave): the worker claims with ``claim_next_batch`` and notes the
started marks of the jobs it starts (written in the completer's batches), and writes each
retry and dead letter with its own fenced ``schedule_retry`` / ``mark_failed_terminal``
(``ratchet_core.worker.parts``, ``ratchet_core.worker.completion``).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast
from uuid import UUID

import attrs

from ratchet_api.errors import StoreDataError, StoreSpiVersionError, UnsupportedCapabilityError
from ratchet_api.model import JobPriority, JobStatus, NodeTagFilter
from ratchet_api.store.entities import (
    ChildSettlement,
    Completion,
    JobEntity,
    NodeEntity,
)
from ratchet_api.store.protocols import (
    CAPABILITIES,
    JobStore,
    RecurringJobStore,
    StreamingBulkStore,
    WorkflowConditionStore,
)
from ratchet_api.store.versions import (
    KNOWN_VERSIONS,
    MIGRATION_GUIDE,
    SPI_1_0,
    STORE_SPI,
    SpiChange,
    SpiVersion,
    changes_since,
    declared_spi_version,
)
from ratchet_core.runtime.store_fallbacks import RecurringFallback, named_priority

_log = logging.getLogger(__name__)

C = TypeVar("C")


@attrs.frozen(kw_only=True)
class DisabledFeature:
    """One thing an older store cannot give the engine: the SPI member it lacks, the feature
    lost and what the engine does instead."""

    member: str
    lost: str
    fallback: str

    def __str__(self) -> str:
        return f"{self.lost} ({self.member})"


@attrs.frozen(kw_only=True)
class SpiStatus:
    """How the engine runs a store: the version it declares, the engine's version and the
    features disabled by the difference (empty for a store at the current version)."""

    store: str
    """The store's class name."""
    declared: SpiVersion
    engine: SpiVersion = STORE_SPI
    disabled: tuple[DisabledFeature, ...] = ()

    @property
    def adapted(self) -> bool:
        """True when the engine runs the store through ``SpiCompatStore``."""
        return self.declared < self.engine

    def summary(self) -> str:
        """One line for the log and ``ratchet health``."""
        if self.declared == self.engine:
            return f"{self.store} implements store SPI {self.declared} (current)"
        if self.declared > self.engine:
            return (
                f"{self.store} implements store SPI {self.declared}, newer than this Ratchet's "
                f"{self.engine}: methods added after {self.engine} are not used"
            )
        features = "; ".join(str(d) for d in self.disabled) or "nothing"
        return (
            f"{self.store} implements store SPI {self.declared} (this Ratchet: {self.engine}); "
            f"disabled: {features}; see {MIGRATION_GUIDE}"
        )


def check_store_spi(store: object) -> SpiVersion:
    """The SPI version ``store`` declares, if the engine can run it. ``StoreSpiVersionError``
    naming both versions and the migration guide for another major version, or a minor version
    of the current major that was never released below the current one."""
    declared = declared_spi_version(store)
    name = type(store).__name__
    if declared.major != STORE_SPI.major:
        advice = (
            f"upgrade Ratchet, or use a release of the store made for store SPI {STORE_SPI.major}.x"
            if declared.major > STORE_SPI.major
            else f"move the store to store SPI {STORE_SPI}"
        )
        raise StoreSpiVersionError(
            f"{name} implements store SPI {declared}; this Ratchet implements store SPI "
            f"{STORE_SPI} and runs stores of SPI {STORE_SPI.major}.x only: {advice} (what "
            f"changed between versions and how to migrate: {MIGRATION_GUIDE})",
            store_version=declared,
            supported=STORE_SPI,
        )
    if declared < STORE_SPI and declared not in KNOWN_VERSIONS:
        known = ", ".join(str(v) for v in KNOWN_VERSIONS)
        raise StoreSpiVersionError(
            f"{name} declares store SPI {declared}, which was never released (released: "
            f"{known}; this Ratchet implements {STORE_SPI}); see {MIGRATION_GUIDE}",
            store_version=declared,
            supported=STORE_SPI,
        )
    return declared


def spi_status(store: object) -> SpiStatus:
    """How the engine runs ``store`` (an adapted store reports its wrapped store's status)."""
    if isinstance(store, SpiCompatStore):
        return store.spi_status
    declared = check_store_spi(store)
    return SpiStatus(store=type(store).__name__, declared=declared)


def adapt_store(store: JobStore) -> JobStore:
    """``store`` ready for the engine: refused (``StoreSpiVersionError``) for another major
    version, unchanged at the current version, wrapped in ``SpiCompatStore`` (with the disabled
    features logged once as a warning) for an older minor version."""
    if isinstance(store, SpiCompatStore):
        return store
    declared = check_store_spi(store)
    if declared >= STORE_SPI:
        if declared > STORE_SPI:
            _log.info("%s", SpiStatus(store=type(store).__name__, declared=declared).summary())
        return store
    adapted = _adapter_class(type(store))(store, declared)
    _log.warning("%s", adapted.spi_status.summary())
    return cast(JobStore, adapted)


_ADAPTER_CLASSES: dict[type, type[SpiCompatStore]] = {}


def _adapter_class(store_type: type) -> type[SpiCompatStore]:
    """A ``SpiCompatStore`` subclass named after the wrapped store's class, so what reports a
    store by its class name (the worker's store metrics, logs) names the store, not the
    adapter."""
    found = _ADAPTER_CLASSES.get(store_type)
    if found is None:
        found = type(store_type.__name__, (SpiCompatStore,), {"__module__": __name__})
        _ADAPTER_CLASSES[store_type] = found
    return found


# ---------------------------------------------------------------- the 1.0 adapter


def _with_named_priority(job: JobEntity) -> JobEntity:
    if isinstance(job.priority, JobPriority):
        return job
    return attrs.evolve(job, priority=named_priority(job.priority))


def _require_aware(value: datetime, field: str) -> None:
    if value.tzinfo is None or value.utcoffset() != timedelta(0):
        raise StoreDataError(field, f"must be timezone-aware UTC, got {value!r}")


def _members(protocol: type) -> list[str]:
    return [
        name
        for name, _ in inspect.getmembers(protocol, inspect.isfunction)
        if not name.startswith("_")
    ]


def _missing_members(obj: object, protocol: type) -> list[str]:
    """Methods of ``protocol`` that ``obj`` lacks, or whose parameters it does not accept by
    the protocol's names (a method of an older version of the protocol)."""
    missing = []
    for name, wanted in inspect.getmembers(protocol, inspect.isfunction):
        if name.startswith("_"):
            continue
        have = getattr(obj, name, None)
        if not callable(have):
            missing.append(name)
            continue
        try:
            params = inspect.signature(have).parameters
        except (TypeError, ValueError):
            continue  # a builtin or C method: cannot tell, trust it
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            continue
        expected = [p for p in inspect.signature(wanted).parameters if p != "self"]
        if any(p not in params for p in expected):
            missing.append(name)
    return missing


def _change(version_changes: Sequence[SpiChange], member: str) -> SpiChange | None:
    return next((c for c in version_changes if c.member == member), None)


class SpiCompatStore:
    """A store of an older minor SPI version presented as a store of ``STORE_SPI``.

    Methods that did not change are passed through; the ones that did get the fallbacks of the
    module docstring. ``spi_status`` names what the fallbacks cannot provide. Attributes the
    engine does not know (a store's own helpers) are read from the wrapped store."""

    ratchet_store_spi = STORE_SPI

    def __init__(
        self, inner: JobStore, declared: SpiVersion, *, status: SpiStatus | None = None
    ) -> None:
        if declared != SPI_1_0:  # the only older minor so far; a new one adds its own fallbacks
            raise StoreSpiVersionError(
                f"no compatibility adapter for store SPI {declared} (this Ratchet: {STORE_SPI})",
                store_version=declared,
                supported=STORE_SPI,
            )
        self._inner = inner
        self._declared = declared
        self._hidden: dict[type, list[str]] = {}
        self._adapted: dict[type, object] = {}
        self._status = status if status is not None else self._probe()

    # ------------------------------------------------------------ status

    @property
    def inner(self) -> JobStore:
        """The wrapped store."""
        return self._inner

    @property
    def spi_status(self) -> SpiStatus:
        return self._status

    def _probe(self) -> SpiStatus:
        changes = changes_since(self._declared)
        disabled: list[DisabledFeature] = []
        for change in changes:
            if "." in change.member:  # a mandatory method or a grown capability method
                protocol_name = change.member.split(".", 1)[0]
                if protocol_name == RecurringJobStore.__name__:
                    continue  # adapted without loss of behaviour (reported below if absent)
                disabled.append(
                    DisabledFeature(
                        member=f"{change.member} (SPI {change.version})",
                        lost=change.lost,
                        fallback=change.fallback,
                    )
                )
        for kind in CAPABILITIES:
            # What the store offers for ``kind``: what its capability() returns, else the store
            # itself when it has some of the methods (a 1.0 store whose capability() checks
            # isinstance against today's protocol no longer advertises a capability that grew).
            found: Any = self._inner.capability(kind)
            missing = _missing_members(found if found is not None else self._inner, kind)
            if found is None:
                if len(missing) == len(_members(kind)):
                    continue  # not implemented at all: an ordinary missing capability
                found = self._inner
            elif not missing:
                continue  # today's protocol: passed through
            if kind is RecurringJobStore and missing == ["advance_next_fire_many"]:
                self._adapted[kind] = RecurringFallback(found)
                continue  # adapted without loss of behaviour
            self._hidden[kind] = missing
            grown = _change(changes, kind.__name__)
            disabled.append(
                DisabledFeature(
                    member=f"{kind.__name__} (lacks {', '.join(missing)})",
                    lost=grown.lost if grown else f"every feature that needs {kind.__name__}",
                    fallback="the capability is not advertised",
                )
            )
        return SpiStatus(
            store=type(self._inner).__name__, declared=self._declared, disabled=tuple(disabled)
        )

    def __repr__(self) -> str:
        return f"{self._inner!r} (store SPI {self._declared} adapter)"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    # ------------------------------------------------------------ JobStore

    def capability(self, kind: Callable[..., C]) -> C | None:
        if kind is WorkflowConditionStore:
            return None  # workflow steps need settle_children (SPI 1.1)
        if kind is StreamingBulkStore:
            return None  # its jobs would pass by this adapter's bulk_insert (priorities)
        if kind in self._hidden:
            return None
        if kind in self._adapted:
            return cast(C, self._adapted[kind])
        return self._inner.capability(kind)

    def joined(self, transaction: object) -> JobStore:
        view = type(self)(self._inner.joined(transaction), self._declared, status=self._status)
        view._hidden = self._hidden
        # the recurring fallback of the view writes through the joined store
        view._adapted = {
            kind: RecurringFallback(view._inner.capability(kind) or view._inner)
            for kind in self._adapted
        }
        return cast(JobStore, view)

    def close(self) -> None:
        self._inner.close()

    # ------------------------------------------------------------ JobCrudStore

    def insert_job(self, job: JobEntity) -> JobEntity:
        return self._inner.insert_job(_with_named_priority(job))

    def find_by_id(self, job_id: UUID) -> JobEntity | None:
        return self._inner.find_by_id(job_id)

    def find_by_idempotency_key(self, key: str) -> JobEntity | None:
        return self._inner.find_by_idempotency_key(key)

    def update_job(self, job: JobEntity) -> JobEntity:
        return self._inner.update_job(_with_named_priority(job))

    def delete_job(self, job_id: UUID) -> bool:
        return self._inner.delete_job(job_id)

    # ------------------------------------------------------------ JobClaimStore

    def claim_next_batch(
        self,
        node_id: str,
        limit: int,
        *,
        execution_targets: Sequence[str] | None = None,
        tag_filter: NodeTagFilter | None = None,
    ) -> list[JobEntity]:
        return self._inner.claim_next_batch(
            node_id, limit, execution_targets=execution_targets, tag_filter=tag_filter
        )

    def mark_dispatched(self, claims: Mapping[UUID, int]) -> set[UUID]:
        """1.0 fallback: no mark is written (every claim already counts as started); the claims
        still current are those whose job reads back RUNNING under the same claim sequence."""
        current = set()
        for job_id, claim_seq in claims.items():
            job = self._inner.find_by_id(job_id)
            if job is not None and job.status is JobStatus.RUNNING and job.claim_seq == claim_seq:
                current.add(job_id)
        return current

    # ------------------------------------------------------------ JobTerminalStore

    def mark_succeeded(self, job_id: UUID, claim_seq: int, result: str | None) -> bool:
        return self._inner.mark_succeeded(job_id, claim_seq, result)

    def mark_succeeded_many(self, completions: Sequence[Completion]) -> set[UUID]:
        return self._inner.mark_succeeded_many(completions)

    def mark_failed_terminal(self, job_id: UUID, claim_seq: int, error: str) -> bool:
        return self._inner.mark_failed_terminal(job_id, claim_seq, error)

    def cancel_job(self, job_id: UUID) -> bool:
        return self._inner.cancel_job(job_id)

    # ------------------------------------------------------------ JobRetryStore

    def schedule_retry(self, job_id: UUID, claim_seq: int, run_at: datetime, error: str) -> bool:
        return self._inner.schedule_retry(job_id, claim_seq, run_at, error)

    def retry_dead_letter(self, job_id: UUID, run_at: datetime | None = None) -> bool:
        return self._inner.retry_dead_letter(job_id, run_at)

    # ------------------------------------------------------------ JobPauseStore

    def pause_job(self, job_id: UUID) -> bool:
        return self._inner.pause_job(job_id)

    def resume_job(self, job_id: UUID) -> bool:
        return self._inner.resume_job(job_id)

    # ------------------------------------------------------------ JobBatchStatusStore

    def compare_and_swap_status(self, job_id: UUID, expected: JobStatus, new: JobStatus) -> bool:
        return self._inner.compare_and_swap_status(job_id, expected, new)

    def release_claim(
        self,
        job_id: UUID,
        claim_seq: int,
        *,
        run_at: datetime | None = None,
        unless_dispatched: bool = False,
    ) -> bool:
        """1.0 fallback. ``unless_dispatched``: refused (every 1.0 claim counts as started, so
        a recoverer retries the job with its attempt counted instead). ``run_at``: a fenced
        ``schedule_retry`` due then, keeping the job's last error; the attempt stays counted
        (a 1.0 store cannot give back an attempt and move the due time in one atomic write).
        Neither: the 1.0 release."""
        if unless_dispatched:
            return False
        if run_at is None:
            return self._inner.release_claim(job_id, claim_seq)
        _require_aware(run_at, "run_at")
        job = self._inner.find_by_id(job_id)
        if job is None or job.status is not JobStatus.RUNNING or job.claim_seq != claim_seq:
            return False  # stale: the fenced write below would refuse it too
        error = job.last_error or "given back unrun, due later (circuit open)"
        return self._inner.schedule_retry(job_id, claim_seq, run_at, error)

    def reset_running_jobs(self, node_id: str) -> int:
        return self._inner.reset_running_jobs(node_id)

    def find_children(self, parent_id: UUID) -> list[JobEntity]:
        return self._inner.find_children(parent_id)

    def release_waiting_children(self, parent_id: UUID, child_ids: Sequence[UUID]) -> int:
        return self._inner.release_waiting_children(parent_id, child_ids)

    def find_orphaned_children(self, limit: int) -> list[JobEntity]:
        return self._inner.find_orphaned_children(limit)

    def settle_children(self, parent_id: UUID, settlements: Sequence[ChildSettlement]) -> set[UUID]:
        """Not available on a 1.0 store: workflow steps (its only caller) are refused at
        enqueue because ``WorkflowConditionStore`` is not advertised."""
        raise UnsupportedCapabilityError(
            "JobBatchStatusStore.settle_children (store SPI 1.1)", "workflow steps"
        )

    # ------------------------------------------------------------ JobBulkStore

    def bulk_insert(self, jobs: Sequence[JobEntity]) -> int:
        return self._inner.bulk_insert([_with_named_priority(j) for j in jobs])

    def reset_orphan_jobs(self, node_ids: Sequence[str], heartbeat_before: datetime) -> int:
        """1.0 fallback: the nodes are read again and those that heartbeat at or after
        ``heartbeat_before`` are spared; the others go through the 1.0 reset (attempt counted).
        A heartbeat landing between this read and the reset is not seen (the 1.0 race)."""
        _require_aware(heartbeat_before, "heartbeat_before")
        nodes = {n.node_id: n for n in self._inner.find_all_nodes()}
        dead = [
            node_id
            for node_id in node_ids
            if node_id not in nodes or nodes[node_id].last_heartbeat < heartbeat_before
        ]
        if not dead:
            return 0
        legacy: Any = self._inner  # the 1.0 signature: reset_orphan_jobs(node_ids)
        return int(legacy.reset_orphan_jobs(dead))

    def find_stale_running_jobs(self, heartbeat_before: datetime, limit: int) -> list[JobEntity]:
        """The 1.0 result with ``dispatched_at`` set to the claim's start: a 1.0 store counts
        every claim's attempt, so recovery must treat every stale claim as started."""
        return [
            job
            if job.dispatched_at is not None
            else attrs.evolve(job, dispatched_at=job.started_at or job.updated_at)
            for job in self._inner.find_stale_running_jobs(heartbeat_before, limit)
        ]

    def touch_running_jobs(self, node_id: str, job_ids: Sequence[UUID]) -> int:
        return self._inner.touch_running_jobs(node_id, job_ids)

    def delete_dead_letter_older_than(self, cutoff: datetime, limit: int) -> int:
        return self._inner.delete_dead_letter_older_than(cutoff, limit)

    # ------------------------------------------------------------ NodeStore

    def server_now(self) -> datetime:
        return self._inner.server_now()

    def upsert_heartbeat(self, node: NodeEntity) -> None:
        self._inner.upsert_heartbeat(node)

    def find_inactive_nodes(self, timeout: timedelta) -> list[NodeEntity]:
        return self._inner.find_inactive_nodes(timeout)

    def find_all_nodes(self) -> list[NodeEntity]:
        return self._inner.find_all_nodes()

    def delete_inactive_nodes(self, timeout: timedelta) -> int:
        return self._inner.delete_inactive_nodes(timeout)

    def delete_nodes_by_ids(self, node_ids: Sequence[str]) -> int:
        return self._inner.delete_nodes_by_ids(node_ids)

    # ------------------------------------------------------------ TagStore

    def insert_tags(self, job_id: UUID, tags: Sequence[str]) -> None:
        self._inner.insert_tags(job_id, tags)

    def delete_tags_by_job_id(self, job_id: UUID) -> int:
        return self._inner.delete_tags_by_job_id(job_id)

    def find_tags(self, job_id: UUID) -> list[str]:
        return self._inner.find_tags(job_id)


__all__ = [
    "DisabledFeature",
    "SpiCompatStore",
    "SpiStatus",
    "adapt_store",
    "check_store_spi",
    "named_priority",
    "spi_status",
]
