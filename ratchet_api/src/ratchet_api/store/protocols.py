"""The store SPI.

``JobStore`` composes the mandatory sub-protocols every store implements. Optional capabilities
(``RecurringJobStore`` ... ``JobExtensionStore``) are advertised by implementing them and probed
with ``store.capability(SignalStore)``; the engine disables a feature whose capability is absent.

Contract rules that hold for every method unless its docstring says otherwise:

* Thread safety: a store instance is shared by all threads of a process; every method is
  thread safe.
* Nullability: arguments are never None unless typed ``| None``; "not found" is ``None`` or
  ``False``/``0``, never an exception, except where ``JobNotFoundError`` is documented.
* Time: "now" is the store's clock (``NodeStore.server_now``), not the caller's, for due times,
  leases and heartbeats. Datetimes passed in must be aware UTC (``StoreDataError`` otherwise).
* Transactions: ``SUPPORTS`` reads may join a caller transaction and never require a write
  transaction; ``REQUIRED`` mutations are atomic (all statements or none) and join the caller
  transaction of a store view returned by ``JobStore.joined``; ``REQUIRES_NEW`` mutations (lock,
  heartbeat, inactive-node deletion) commit independently of any caller transaction.
* Fencing: methods taking ``claim_seq`` apply only to a RUNNING job whose current claim sequence
  equals it, and report a stale caller with ``False`` while changing nothing.
* Errors: driver errors are translated into ``StoreError`` (``TransientStoreError`` when retrying
  may succeed); invalid values are refused with ``StoreDataError`` naming the field.

Versions: these protocols are store SPI ``ratchet_api.store.versions.STORE_SPI`` (1.1). A store
declares the version it implements with ``ratchet_store_spi = (1, 1)`` (none declared: 1.0); the
engine runs a store of an older minor version through an adapter with the newer features
disabled, and refuses another major version. Methods added after 1.0 say so in their
docstrings; ``docs/stores/changelog.md`` lists every change and what a store must do.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Protocol, TypeVar, runtime_checkable
from uuid import UUID

from ratchet_api.model import JobStatus, NodeTagFilter, StateWriteResult, VersionedState
from ratchet_api.store.entities import (
    BatchEntity,
    BatchStatus,
    ChildSettlement,
    Completion,
    ExecutionRecord,
    FailedClaim,
    JobEntity,
    JobLogLine,
    JobQuery,
    LockEntity,
    NodeEntity,
    RecurringAdvance,
    RecurringJobEntity,
    StoredValue,
    WorkflowConditionEntity,
)
from ratchet_api.store.queues import QueueStats

C = TypeVar("C")


@runtime_checkable
class JobCrudStore(Protocol):
    """Create, read, update and delete jobs."""

    def insert_job(self, job: JobEntity) -> JobEntity:
        """Insert ``job`` with its tags. REQUIRED.

        If ``job.idempotency_key`` is set and a job with that key exists, nothing is written and
        the existing job is returned (compare ids to tell). Raises ``DuplicateJobError`` when the
        id exists, ``StoreDataError`` for an invalid field.
        """
        ...

    def find_by_id(self, job_id: UUID) -> JobEntity | None:
        """The job with its tags, or None. SUPPORTS."""
        ...

    def find_by_idempotency_key(self, key: str) -> JobEntity | None:
        """The job holding ``key``, or None. SUPPORTS."""
        ...

    def update_job(self, job: JobEntity) -> JobEntity:
        """Replace every stored field of ``job`` (tags included), set ``updated_at`` to now and
        return the stored job. Unfenced: for administration, not for workers. REQUIRED.
        Raises ``JobNotFoundError``."""
        ...

    def delete_job(self, job_id: UUID) -> bool:
        """Delete the job and everything owned by it (tags, properties, state, logs,
        executions). True if it existed. REQUIRED."""
        ...


@runtime_checkable
class JobClaimStore(Protocol):
    """Atomic claiming of due jobs."""

    def claim_next_batch(
        self,
        node_id: str,
        limit: int,
        *,
        execution_targets: Sequence[str] | None = None,
        tag_filter: NodeTagFilter | None = None,
    ) -> list[JobEntity]:
        """Claim up to ``limit`` PENDING jobs due at the store's now. REQUIRED.

        Order: priority (highest first; any int of -100..100, compared exactly), then
        ``scheduled_at``, then id. Each claimed job becomes
        RUNNING with ``owner=node_id``, ``started_at=heartbeat_at=now``, ``attempt + 1`` and
        ``claim_seq + 1``; the returned entities carry the new values. Atomic against every
        concurrent caller in any process: a job is returned to exactly one caller per claim.
        ``execution_targets`` restricts to jobs whose target label is in the list (None: any;
        a job with no label matches any node). ``tag_filter`` keeps jobs carrying every required
        tag and none of the excluded ones. ``dispatched_at`` of a claimed job is None.
        """
        ...

    def mark_dispatched(self, claims: Mapping[UUID, int]) -> set[UUID]:
        """Record that the worker starts (or has just started) running these claims (job id ->
        claim sequence): ``dispatched_at=now`` on each job still RUNNING under that claim
        sequence. Returns the ids whose claim is current (marked now or before); a job left out
        was recovered, cancelled or claimed again since, and its caller should not run it (or,
        for a mark written after the start, should expect its outcome to be refused). REQUIRED,
        atomic per job, in as few round trips as the backend allows (the worker batches the
        marks of jobs starting together).

        The mark is what lets recovery tell a job that never ran from one that may have: a
        claim recovered or given back while ``dispatched_at`` is None does not count its
        attempt (``reset_orphan_jobs``, ``release_claim``), so a worker that dies holding
        prefetched jobs never pushes them towards the dead letter.

        Since store SPI 1.1.
        """
        ...


@runtime_checkable
class JobTerminalStore(Protocol):
    """Terminal transitions: success, dead letter, cancellation."""

    def mark_succeeded(self, job_id: UUID, claim_seq: int, result: str | None) -> bool:
        """Fenced RUNNING -> SUCCEEDED with ``result`` and ``finished_at=now``; clears owner.
        REQUIRED."""
        ...

    def mark_succeeded_many(self, completions: Sequence[Completion]) -> set[UUID]:
        """Apply many fenced success writes in as few round trips as the backend allows; returns
        the ids that applied (stale ones are left out). REQUIRED, atomic per job."""
        ...

    def mark_failed_terminal(self, job_id: UUID, claim_seq: int, error: str) -> bool:
        """Fenced RUNNING -> FAILED (the dead letter) with ``last_error`` and ``finished_at``.
        REQUIRED."""
        ...

    def cancel_job(self, job_id: UUID) -> bool:
        """Any non-terminal status -> CANCELLED with ``finished_at``; a RUNNING job's claim is
        thereby superseded. False if the job is terminal or missing. REQUIRED."""
        ...


@runtime_checkable
class JobRetryStore(Protocol):
    """Retry scheduling."""

    def schedule_retry(self, job_id: UUID, claim_seq: int, run_at: datetime, error: str) -> bool:
        """Fenced RUNNING -> PENDING due at ``run_at`` with ``last_error``; clears owner.
        REQUIRED."""
        ...

    def retry_dead_letter(self, job_id: UUID, run_at: datetime | None = None) -> bool:
        """FAILED -> PENDING due at ``run_at`` (None: now) with ``attempt`` reset to 0 and
        ``finished_at`` cleared; for an operator's retry. REQUIRED."""
        ...


@runtime_checkable
class JobPauseStore(Protocol):
    """Pause and resume."""

    def pause_job(self, job_id: UUID) -> bool:
        """PENDING -> PAUSED. False from any other status. REQUIRED."""
        ...

    def resume_job(self, job_id: UUID) -> bool:
        """PAUSED -> PENDING atomically (one caller wins). REQUIRED."""
        ...


@runtime_checkable
class JobBatchStatusStore(Protocol):
    """Non-terminal status changes, release, and parent/child (orphan) operations."""

    def compare_and_swap_status(self, job_id: UUID, expected: JobStatus, new: JobStatus) -> bool:
        """Set ``new`` only if the current status is ``expected``. REQUIRED."""
        ...

    def release_claim(
        self,
        job_id: UUID,
        claim_seq: int,
        *,
        run_at: datetime | None = None,
        unless_dispatched: bool = False,
    ) -> bool:
        """Fenced RUNNING -> PENDING without counting the attempt (``attempt - 1``), owner,
        ``started_at``, ``heartbeat_at`` and ``dispatched_at`` cleared, for jobs claimed but
        never started (graceful shutdown, recovery of a stale claim, a call refused by an open
        circuit breaker). With ``run_at`` (timezone-aware UTC) the job is due again only then
        (``scheduled_at = run_at``); without it its ``scheduled_at`` is unchanged. With
        ``unless_dispatched`` it also changes nothing and returns False when
        ``mark_dispatched`` applied to this claim (checked atomically with the release), so a
        recoverer cannot give back uncounted a claim whose job has started meanwhile. REQUIRED.

        Since store SPI 1.1: ``run_at`` and ``unless_dispatched`` (1.0:
        ``release_claim(job_id, claim_seq)``).
        """
        ...

    def reset_running_jobs(self, node_id: str) -> int:
        """Every RUNNING job owned by ``node_id`` -> PENDING (attempt stays counted), owner
        cleared; returns the count. REQUIRED."""
        ...

    def find_children(self, parent_id: UUID) -> list[JobEntity]:
        """Jobs whose ``parent_id`` is ``parent_id``, oldest first. SUPPORTS."""
        ...

    def release_waiting_children(self, parent_id: UUID, child_ids: Sequence[UUID]) -> int:
        """WAITING children of ``parent_id`` listed in ``child_ids`` -> PENDING due now.
        REQUIRED."""
        ...

    def find_orphaned_children(self, limit: int) -> list[JobEntity]:
        """WAITING jobs whose parent is terminal or missing (their release was lost). SUPPORTS."""
        ...

    def settle_children(self, parent_id: UUID, settlements: Sequence[ChildSettlement]) -> set[UUID]:
        """Move WAITING children of ``parent_id`` as each settlement says, all in one atomic
        unit (every listed child that is still WAITING moves, or none does): PENDING due now,
        AWAITING_SIGNAL with ``signal_deadline``, or CANCELLED with ``last_error=reason`` and
        ``finished_at``. Children that are not WAITING (already settled by a concurrent or an
        earlier call) or whose ``parent_id`` differs are left unchanged, so repeating a call is
        harmless. Returns the ids that moved. REQUIRED.

        Since store SPI 1.1."""
        ...


@runtime_checkable
class JobBulkStore(Protocol):
    """Bulk operations and cleanup."""

    def bulk_insert(self, jobs: Sequence[JobEntity]) -> int:
        """Insert many jobs (and their tags) with multi-row statements, atomically. Idempotency
        keys that already exist are skipped, not raised. Returns the number inserted. REQUIRED."""
        ...

    def reset_orphan_jobs(self, node_ids: Sequence[str], heartbeat_before: datetime) -> int:
        """Recover the jobs of dead nodes: RUNNING jobs owned by any of ``node_ids`` -> PENDING
        due now, owner and ``dispatched_at`` cleared. The attempt stays counted for a job whose
        claim was dispatched (``mark_dispatched``: it may have run) and is given back
        (``attempt - 1``) for one that was not (claimed, never started). Returns the count.
        REQUIRED.

        ``heartbeat_before`` (aware UTC, usually the store's now minus the node timeout) closes
        the race between finding inactive nodes and resetting their jobs: a job is reset only
        if, checked atomically with the reset (one statement or one transaction),

        * its owner has no node row whose ``last_heartbeat`` is at or after
          ``heartbeat_before`` (a node that heartbeat again in between keeps every job), and
        * its own ``heartbeat_at`` is unset or before ``heartbeat_before`` (a job claimed or
          touched since, e.g. by a node resumed after a pause that claimed before its first
          heartbeat, is never taken from under it).

        ``StoreDataError`` for a naive ``heartbeat_before``.

        Since store SPI 1.1: ``heartbeat_before`` and the started-mark rule (1.0:
        ``reset_orphan_jobs(node_ids)``, the attempt always counted).
        """
        ...

    def find_stale_running_jobs(self, heartbeat_before: datetime, limit: int) -> list[JobEntity]:
        """RUNNING jobs whose ``heartbeat_at`` is older than ``heartbeat_before``. SUPPORTS."""
        ...

    def touch_running_jobs(self, node_id: str, job_ids: Sequence[UUID]) -> int:
        """Set ``heartbeat_at=now`` on those RUNNING jobs owned by ``node_id``. REQUIRED."""
        ...

    def delete_dead_letter_older_than(self, cutoff: datetime, limit: int) -> int:
        """Delete up to ``limit`` FAILED jobs finished before ``cutoff``. REQUIRED."""
        ...


@runtime_checkable
class NodeStore(Protocol):
    """Node registration, heartbeats and dead-node detection."""

    def server_now(self) -> datetime:
        """The store's clock, aware UTC. SUPPORTS."""
        ...

    def upsert_heartbeat(self, node: NodeEntity) -> None:
        """Create or refresh the node; ``last_heartbeat`` is set to the store's now (the
        entity's value is ignored). REQUIRES_NEW."""
        ...

    def find_inactive_nodes(self, timeout: timedelta) -> list[NodeEntity]:
        """Nodes whose last heartbeat is older than now - ``timeout``. SUPPORTS."""
        ...

    def find_all_nodes(self) -> list[NodeEntity]:
        """Every registered node. SUPPORTS."""
        ...

    def delete_inactive_nodes(self, timeout: timedelta) -> int:
        """Delete nodes inactive for longer than ``timeout``. REQUIRES_NEW."""
        ...

    def delete_nodes_by_ids(self, node_ids: Sequence[str]) -> int:
        """Delete the listed nodes. REQUIRES_NEW."""
        ...


@runtime_checkable
class TagStore(Protocol):
    """Job tag writes."""

    def insert_tags(self, job_id: UUID, tags: Sequence[str]) -> None:
        """Add tags (duplicates ignored). ``StoreDataError`` for a tag over
        ``MAX_TAG_LENGTH``; ``JobNotFoundError`` for a missing job. REQUIRED."""
        ...

    def delete_tags_by_job_id(self, job_id: UUID) -> int:
        """Remove every tag of the job; returns the count. REQUIRED."""
        ...

    def find_tags(self, job_id: UUID) -> list[str]:
        """The job's tags, sorted. SUPPORTS."""
        ...


@runtime_checkable
class JobStore(
    JobCrudStore,
    JobClaimStore,
    JobTerminalStore,
    JobRetryStore,
    JobPauseStore,
    JobBatchStatusStore,
    JobBulkStore,
    NodeStore,
    TagStore,
    Protocol,
):
    """Everything a conforming store must provide."""

    def capability(self, kind: Callable[..., C]) -> C | None:
        """This store as ``kind`` if it advertises that capability, else None.

        The usual implementation is ``return self if isinstance(self, cast(type, kind)) else None`` (every
        capability protocol is runtime checkable); a store may return a helper object instead.
        """
        ...

    def joined(self, transaction: object) -> JobStore:
        """A view of this store whose REQUIRED mutations run inside the caller's transaction
        handle (a SQLAlchemy ``Connection`` for SQL stores, a pymongo ``ClientSession`` for
        Mongo): commit makes them visible, rollback undoes them. REQUIRES_NEW methods still
        commit on their own. Raises ``StoreError`` for a handle the store cannot join."""
        ...

    def close(self) -> None:
        """Release connections. Idempotent."""
        ...


# ---------------------------------------------------------------- optional capabilities


@runtime_checkable
class RecurringJobStore(Protocol):
    """Recurring (cron) definitions."""

    def save_recurring(self, recurring: RecurringJobEntity) -> RecurringJobEntity:
        """Insert or replace the definition named ``recurring.name``. REQUIRED."""
        ...

    def find_recurring(self, name: str) -> RecurringJobEntity | None:
        """SUPPORTS."""
        ...

    def list_recurring(self) -> list[RecurringJobEntity]:
        """Every definition, by name. SUPPORTS."""
        ...

    def find_due_recurring(self, limit: int) -> list[RecurringJobEntity]:
        """Enabled definitions with ``next_fire_at`` at or before now, earliest first. SUPPORTS."""
        ...

    def advance_next_fire(
        self, name: str, expected_fire_at: datetime, next_fire_at: datetime
    ) -> bool:
        """CAS: move ``next_fire_at`` from ``expected_fire_at`` to ``next_fire_at`` and set
        ``last_fired_at=expected_fire_at``. Exactly one concurrent caller wins a fire time; the
        winner enqueues the occurrence. REQUIRED."""
        ...

    def advance_next_fire_many(self, advances: Sequence[RecurringAdvance]) -> set[str]:
        """``advance_next_fire`` for many definitions in one unit of work (one commit where the
        store has transactions): each advance is its own compare-and-set, applied or not
        independently of the others; returns the names whose advance applied. Rows are
        visited in name order, so concurrent callers cannot deadlock. REQUIRED."""
        ...

    def delete_recurring(self, name: str) -> bool:
        """Remove the definition; True if it existed. REQUIRED."""
        ...


@runtime_checkable
class BatchStore(Protocol):
    """Batch progress tracking.

    A store advertising this capability counts a batch's progress itself: every terminal
    transition of a job whose ``batch_id`` is set (``mark_succeeded``, ``mark_succeeded_many``
    as succeeded; ``mark_failed_terminal``, ``cancel_job``, ``expire_signal`` as failed) adds one
    to its batch's ``succeeded`` or ``failed`` in the same unit of work as the job's own write,
    so a crash can never leave a finished child uncounted or count it twice. A transition that
    does not apply (stale claim, already terminal) counts nothing. A store whose backend cannot
    afford that unit of work on its hot path (the Mongo store) writes the count right after the
    job's write and relies on ``recount_batch`` to repair a count lost to a crash in between.
    """

    def save_batch(self, batch: BatchEntity) -> BatchEntity:
        """Insert a batch. REQUIRED."""
        ...

    def insert_batch(self, batch: BatchEntity, jobs: Sequence[JobEntity]) -> int:
        """Insert ``batch`` and ``jobs`` (its children, parent and callback jobs) in one unit of
        work: both or neither, joining the caller's transaction on a joined view. Jobs whose
        idempotency key exists are skipped as by ``bulk_insert``. Returns the number of jobs
        inserted. REQUIRED."""
        ...

    def add_batch_jobs(self, batch_id: UUID, jobs: Sequence[JobEntity]) -> int:
        """One chunk of an OPEN batch in one unit of work: insert ``jobs`` (those whose
        idempotency key exists are skipped) and add the number inserted to the batch's total.
        Returns that number. Raises ``InvalidStateTransitionError`` (nothing written) if the
        batch does not exist or is not OPEN. REQUIRED."""
        ...

    def find_batches(
        self, *, statuses: frozenset[BatchStatus] | None = None, limit: int = 100, offset: int = 0
    ) -> list[BatchEntity]:
        """Batches (of any status when ``statuses`` is None), newest first. SUPPORTS."""
        ...

    def recount_batch(self, batch_id: UUID) -> BatchEntity | None:
        """Count the batch's children in terminal statuses (SUCCEEDED as succeeded, FAILED and
        CANCELLED as failed) and raise the stored counts to them where they are lower (never
        lowers a count: archived children are no longer seen). Returns the batch, or None if
        it does not exist. REQUIRED."""
        ...

    def record_batch_error(self, batch_id: UUID, error: str) -> bool:
        """Set the batch's ``last_error`` (a streaming chunk failed); False if the batch does
        not exist. REQUIRED."""
        ...

    def find_batch(self, batch_id: UUID) -> BatchEntity | None:
        """SUPPORTS."""
        ...

    def add_to_total(self, batch_id: UUID, count: int) -> BatchEntity:
        """Atomically add ``count`` children to an OPEN batch's total. REQUIRED.
        Raises ``InvalidStateTransitionError`` if the batch is not OPEN."""
        ...

    def seal_batch(self, batch_id: UUID) -> bool:
        """OPEN -> SEALED: the total is final. REQUIRED."""
        ...

    def increment_finished(self, batch_id: UUID, succeeded: bool) -> BatchEntity:
        """Atomically count one finished child (as succeeded or failed); returns the new
        progress. Concurrent increments never lose a count. REQUIRED."""
        ...

    def mark_batch_complete_if_ready(self, batch_id: UUID) -> bool:
        """SEALED -> COMPLETED when ``succeeded + failed >= total``; True for exactly one caller
        (who then releases the completion callbacks). REQUIRED."""
        ...


@runtime_checkable
class WorkflowConditionStore(Protocol):
    """Conditions linking workflow steps to their parent."""

    def save_conditions(self, conditions: Sequence[WorkflowConditionEntity]) -> None:
        """Insert conditions. REQUIRED."""
        ...

    def find_conditions_by_parent(self, parent_job_id: UUID) -> list[WorkflowConditionEntity]:
        """Conditions of the parent ordered by ``position``. SUPPORTS."""
        ...

    def delete_conditions_by_parent(self, parent_job_id: UUID) -> int:
        """REQUIRED."""
        ...


@runtime_checkable
class SignalStore(Protocol):
    """Jobs waiting for signals."""

    def deliver_signal_by_id(self, job_id: UUID, payload: str | None) -> bool:
        """AWAITING_SIGNAL -> PENDING due now with ``signal_payload``; exactly one concurrent
        delivery wins. REQUIRED."""
        ...

    def deliver_signal_by_key(self, signal_key: str, payload: str | None) -> int:
        """Deliver to every job awaiting ``signal_key``; returns how many. REQUIRED."""
        ...

    def find_timed_out_signal_jobs(self, limit: int) -> list[JobEntity]:
        """AWAITING_SIGNAL jobs whose ``signal_deadline`` passed (store's now). SUPPORTS."""
        ...

    def expire_signal(self, job_id: UUID, error: str, status: JobStatus = JobStatus.FAILED) -> bool:
        """AWAITING_SIGNAL -> ``status`` with ``last_error`` (timeout); loses to a concurrent
        delivery (exactly one of them wins). ``status`` is FAILED (with ``finished_at``, the
        default), CANCELLED (with ``finished_at``) or PENDING (due now, to run without a
        payload); ``StoreDataError`` for any other. REQUIRED."""
        ...

    def find_jobs_by_signal_key(self, signal_key: str, limit: int) -> list[JobEntity]:
        """Jobs (any status) whose ``signal_key`` is ``signal_key``, oldest first. SUPPORTS."""
        ...


@runtime_checkable
class ResourcePermitStore(Protocol):
    """Counting permits per resource key (concurrency limits)."""

    def try_acquire_permit(
        self, resource_key: str, holder: str, limit: int, ttl: timedelta
    ) -> bool:
        """Take a permit if fewer than ``limit`` live permits exist (expired ones do not count
        and may be replaced). Re-acquiring by the same holder refreshes it and succeeds.
        Atomic against concurrent callers. REQUIRED."""
        ...

    def release_permit(self, resource_key: str, holder: str) -> bool:
        """REQUIRED."""
        ...

    def count_permits(self, resource_key: str) -> int:
        """Live (unexpired) permits. SUPPORTS."""
        ...


@runtime_checkable
class FlowControlStore(Protocol):
    """What the worker's flow control needs besides permits: giving back a claim without
    counting the attempt, due later, and cluster-wide rate limits (token buckets on the store's
    clock)."""

    def defer_claim(self, job_id: UUID, claim_seq: int, run_at: datetime) -> bool:
        """Fenced RUNNING -> PENDING due at ``run_at`` without counting the attempt
        (``attempt - 1``), owner cleared: a claimed job that was not admitted (permit or rate
        limit) and must not run now. REQUIRED."""
        ...

    def acquire_rate(self, key: str, limit: int, per: timedelta) -> timedelta:
        """Take one token of the bucket ``key`` holding at most ``limit`` tokens and refilled
        at ``limit`` per ``per`` on the store's clock (a new bucket starts full). Returns
        ``timedelta(0)`` when a token was taken, else how long until one is available (nothing
        taken). Atomic against concurrent callers in any process. REQUIRED."""
        ...


@runtime_checkable
class LockStore(Protocol):
    """Best-effort expiring leases (not a fencing primitive).

    Acquisition for one name is atomic: while a lease is live at most one racing caller
    succeeds; an expired lease is reclaimable without the old holder. ``unlock`` and
    ``renew_lock`` check the owner atomically and do nothing for another owner. Expiry uses the
    store's clock. All three methods are REQUIRES_NEW.
    """

    def try_lock(self, name: str, owner: str, ttl: timedelta) -> bool:
        """Acquire (or re-acquire as the same owner) the lease for ``ttl``."""
        ...

    def unlock(self, name: str, owner: str) -> bool:
        """Release if held by ``owner``; False and unchanged otherwise."""
        ...

    def renew_lock(self, name: str, owner: str, ttl: timedelta) -> bool:
        """Extend a live lease held by ``owner`` to now + ``ttl``; False means the lease is
        lost and the caller must stop the protected work."""
        ...

    def find_lock(self, name: str) -> LockEntity | None:
        """The current lease row (possibly expired), or None. SUPPORTS."""
        ...


@runtime_checkable
class ArchiveStore(Protocol):
    """Moving finished jobs out of the hot table."""

    def archive_job(self, job_id: UUID) -> bool:
        """Move a terminal job (with its tags, properties and state) to the archive in one
        atomic step: afterwards it is in exactly one place. False if missing or not terminal.
        REQUIRED."""
        ...

    def archive_finished_before(
        self, cutoff: datetime, limit: int, statuses: Collection[JobStatus] | None = None
    ) -> int:
        """Archive up to ``limit`` terminal jobs finished before ``cutoff``, oldest finished
        first; with ``statuses``, only jobs in one of those (terminal) statuses. Each job moves
        as ``archive_job`` moves it. Returns the number moved. REQUIRED."""
        ...

    def delete_archived_before(self, cutoff: datetime, limit: int) -> int:
        """Delete up to ``limit`` archived jobs finished before ``cutoff`` (oldest first) with
        everything they own (properties, state, executions, logs); never touches the hot jobs.
        Returns the number deleted. REQUIRED."""
        ...

    def find_archived_job(self, job_id: UUID) -> JobEntity | None:
        """SUPPORTS."""
        ...

    def find_archived_jobs(self, limit: int, offset: int = 0) -> list[JobEntity]:
        """Newest finished first. SUPPORTS."""
        ...


@runtime_checkable
class JobQueryStore(Protocol):
    """Read-only projections for administration and dashboards."""

    def search_jobs(self, query: JobQuery) -> list[JobEntity]:
        """Jobs matching every filter, ordered by ``created_at`` then id. SUPPORTS.
        ``UnsupportedCapabilityError`` for property filters without ``JobExtensionStore``."""
        ...

    def count_jobs(self, query: JobQuery) -> int:
        """SUPPORTS (limit/offset ignored)."""
        ...

    def find_job_ids_by_tag(self, tag: str, limit: int) -> list[UUID]:
        """SUPPORTS."""
        ...


@runtime_checkable
class JobAnalyticsStore(Protocol):
    """Aggregates over jobs."""

    def count_jobs_by_status(self) -> dict[JobStatus, int]:
        """Every status with its count (0 included). SUPPORTS."""
        ...

    def count_finished_since(self, since: datetime) -> dict[JobStatus, int]:
        """Terminal jobs finished at or after ``since``, by status; rates are counts over the
        window. SUPPORTS."""
        ...

    def execution_time_percentile(self, percentile: float, since: datetime) -> timedelta | None:
        """The ``percentile`` (0-100) of ``finished_at - started_at`` for jobs SUCCEEDED since
        ``since`` (nearest-rank); None without data. SUPPORTS."""
        ...

    def queue_wait_percentile(self, percentile: float, since: datetime) -> timedelta | None:
        """The percentile of ``started_at - scheduled_at`` for jobs started since ``since``.
        SUPPORTS."""
        ...


@runtime_checkable
class FairClaimStore(Protocol):
    """Claims that interleave fairness keys (``JobEntity.fairness_key``, e.g. a tenant), so a
    burst of one key does not starve the others. A store with it changes the order of
    ``JobClaimStore.claim_next_batch`` (and ``WorkerBatchStore.claim_and_start``) among due
    jobs of equal priority: round robin across keys. Jobs without a key form one group of
    their own; a claim over jobs of that group only is ordered exactly as without the
    capability. A store without it gets the engine's fallback: the key is stored and shown
    but claims keep the plain order (a warning names the store once).

    Since store SPI 1.1 (third wave)."""

    def claims_fairly(self) -> bool:
        """True: every claim picks due jobs by priority (highest first), then by their rank,
        then ``scheduled_at``, then id. A job's rank is its position within its ``(priority,
        fairness_key)`` group (1 for each group's first job by ``scheduled_at``, id; 2 for its
        second; ...) plus, for a keyed job, the number of RUNNING jobs with its key (so a
        claim of one job goes to the key running the fewest). The claim returns its jobs in
        that order, ranked among themselves (``ratchet_api.store.fairness.fair_claim_order``).
        ``fairness_key`` is stored and read back as written (at most 255 characters). A claim
        may see keyed jobs written by another process about a second late (a store may keep
        the plain claim while it has seen no keyed PENDING job)."""
        ...


@runtime_checkable
class QueueStatsStore(Protocol):
    """Queue figures in one read, for autoscalers, metrics and the dashboard's queues page.
    A store without it gets the engine's fallback: a bounded scan through ``JobQueryStore``
    (``QueueStats.exact`` False)."""

    def queue_stats(self, finished_since: datetime | None = None) -> QueueStats:
        """One row per ``(execution_target, target, priority band)`` with a counted job
        (``ratchet_api.store.queues``): PENDING jobs, those due at the store's clock
        (``scheduled_at <= now``) and their earliest ``scheduled_at``, RUNNING jobs and, when
        ``finished_since`` is given, SUCCEEDED and FAILED jobs whose ``finished_at`` is at or
        after it. ``now`` is the store's clock of the read. Read in one statement (one
        snapshot) where the backend allows, through indexes on status. ``StoreDataError``
        for a naive ``finished_since``. SUPPORTS."""
        ...


@runtime_checkable
class WorkerBatchStore(Protocol):
    """The worker's hot writes with fewer round trips: started marks written by the claim
    itself, and many fenced failure writes at once. A store without it gets the engine's
    fallback: ``claim_next_batch`` then ``mark_dispatched`` for the jobs that start (batched
    by the worker), and one ``schedule_retry`` / ``mark_failed_terminal`` per failed job.

    Since store SPI 1.1 (third wave)."""

    def claim_and_start(
        self,
        node_id: str,
        limit: int,
        *,
        start: int,
        execution_targets: Sequence[str] | None = None,
        tag_filter: NodeTagFilter | None = None,
    ) -> list[JobEntity]:
        """``JobClaimStore.claim_next_batch`` (same order, filters and atomicity) that also
        marks started, in the same atomic unit, the first ``start`` of the claimed jobs in
        claim order: their ``dispatched_at`` is the claim's now, exactly as if
        ``mark_dispatched`` had been called for them at once, and the returned entities carry
        it. The others come back with ``dispatched_at`` None (prefetched: marked later, when
        they start). ``start`` 0 is a plain claim; ``start >= limit`` marks every claimed
        job. REQUIRED."""
        ...

    def write_failures(self, failures: Sequence[FailedClaim]) -> set[UUID]:
        """Apply many fenced failure writes (``FailedClaim``: a RETRY as ``schedule_retry``
        does it, a DEAD_LETTER as ``mark_failed_terminal`` does it, batch counted) in as few
        round trips as the backend allows (one where it can); each applies only while its
        job is RUNNING under its claim sequence. Returns the ids written (a stale write is
        left out and changes nothing). Atomic per job; two writes for one job in a call: only
        the last is applied. REQUIRED."""
        ...


@runtime_checkable
class StreamingBulkStore(Protocol):
    """A bulk insert whose jobs arrive in parts, so the store can write the first parts while
    the engine builds the next (PostgreSQL: one COPY that the server inserts and indexes while
    the client is still building rows). A store without it gets the engine's fallback: every
    part built first, then one ``JobBulkStore.bulk_insert``.

    Since store SPI 1.1 (third wave)."""

    def bulk_insert_parts(self, parts: Iterable[Sequence[JobEntity]]) -> int:
        """``JobBulkStore.bulk_insert`` of the jobs of every part, in order, as one atomic
        unit: the same checks (a bad job refused with ``StoreDataError`` naming the field,
        nothing of any part written), the same skipping of idempotency keys that exist or
        repeat (across parts too), tags kept; returns the number inserted. The store may write
        a part before it reads the next one, and reads ``parts`` once. When iterating
        ``parts`` raises, nothing of any part is written and that exception propagates
        unchanged. REQUIRED."""
        ...


@runtime_checkable
class JobAuditStore(Protocol):
    """Execution history and per-job logs."""

    def save_execution(self, record: ExecutionRecord) -> None:
        """REQUIRED."""
        ...

    def save_executions(self, records: Sequence[ExecutionRecord]) -> None:
        """Save several records as ``save_execution`` does, in one statement / round trip where
        the backend allows (the worker writes the records of a batch of completions with it).
        An empty sequence writes nothing. REQUIRED."""
        ...

    def find_executions_by_job_id(self, job_id: UUID) -> list[ExecutionRecord]:
        """Ordered by attempt. SUPPORTS."""
        ...

    def append_logs(self, lines: Sequence[JobLogLine]) -> None:
        """Append lines (one round trip where possible). REQUIRED."""
        ...

    def find_logs_by_job_id(self, job_id: UUID, limit: int = 1000) -> list[JobLogLine]:
        """Lines in the order they were appended. SUPPORTS."""
        ...


@runtime_checkable
class JobExtensionStore(Protocol):
    """Indexed per-job properties (write-once) and versioned per-namespace state."""

    def put_property(self, job_id: UUID, key: str, value: str) -> bool:
        """Write-once: True if written, False if ``key`` already exists (value unchanged).
        ``JobNotFoundError`` for a missing job. REQUIRED."""
        ...

    def get_property(self, job_id: UUID, key: str) -> str | None:
        """SUPPORTS."""
        ...

    def get_properties_by_prefix(self, job_id: UUID, prefix: str) -> dict[str, str]:
        """Properties whose key starts with ``prefix`` (literally: ``%`` and ``_`` are not
        wildcards). SUPPORTS."""
        ...

    def get_state(self, job_id: UUID, namespace: str) -> VersionedState | None:
        """SUPPORTS."""
        ...

    def init_state(
        self, job_id: UUID, namespace: str, state: str, expected_claim_seq: int | None = None
    ) -> StateWriteResult:
        """Create version 0. VERSION_CONFLICT if state exists. With ``expected_claim_seq`` the
        write is fenced: SUPERSEDED unless the job is RUNNING with that claim sequence.
        REQUIRED."""
        ...

    def update_state(
        self,
        job_id: UUID,
        namespace: str,
        state: str,
        expected_version: int,
        expected_claim_seq: int | None = None,
    ) -> StateWriteResult:
        """CAS on ``expected_version``: UPDATED (version + 1), VERSION_CONFLICT (re-read), or
        SUPERSEDED (fence failed; checked before the version). VERSION_CONFLICT also when no
        state exists. REQUIRED."""
        ...

    def properties_for_jobs(self, job_ids: Sequence[UUID]) -> Mapping[UUID, dict[str, str]]:
        """Every property of each listed job (missing jobs map to nothing). SUPPORTS."""
        ...


@runtime_checkable
class SealedValueStore(Protocol):
    """Bulk read and compare-and-set rewrite of the values payload encryption seals (key
    rotation, ``ratchet keys status``). Values are returned and compared exactly as stored;
    the store never interprets them."""

    def scan_values(self, after: UUID | None, limit: int) -> list[StoredValue]:
        """The non-null ``payload``, ``result``, ``last_error`` and ``signal_payload`` of the
        first ``limit`` live jobs (not archived) whose id is greater than ``after`` (all jobs
        when None), in ascending id order, followed per job by its state in every namespace and
        by the non-null ``expression`` of the workflow condition whose ``child_job_id`` is the
        job (column ``condition``). A job's values are never split across pages; the last job
        id of a page is the next ``after``. SUPPORTS."""
        ...

    def replace_values(self, changes: Sequence[tuple[StoredValue, str]]) -> int:
        """For each ``(value, new_text)``: write ``new_text`` in place of ``value`` only if the
        stored text still equals ``value.text`` (compare and set; state keeps its version;
        nothing else of the job changes, ``updated_at`` included). Returns how many were
        written; the others changed meanwhile or are gone. One transaction for the whole
        list. ``StoreDataError`` for a column outside ``STORED_VALUE_COLUMNS``. REQUIRED."""
        ...


@runtime_checkable
class SealedArchiveStore(Protocol):
    """``SealedValueStore`` over the archive: the values payload encryption sealed in jobs that
    retention (or ``ArchiveStore.archive_job``) moved out of the live tables, so that key
    rotation can re-seal them and a retired key can be dropped. Same contract as the live
    scan: values are returned and compared exactly as stored, pages are by job id, and a job's
    values are never split across pages."""

    def scan_archived_values(self, after: UUID | None, limit: int) -> list[StoredValue]:
        """The non-null ``payload``, ``result``, ``last_error`` and ``signal_payload`` of the
        first ``limit`` archived jobs whose id is greater than ``after`` (all when None), in
        ascending id order, followed per job by the state it was archived with, in every
        namespace, and by the non-null ``expression`` of the workflow condition whose
        ``child_job_id`` is the job (column ``condition``). A job's values are never split
        across pages; the last job id of a page is the next ``after``. SUPPORTS."""
        ...

    def replace_archived_values(self, changes: Sequence[tuple[StoredValue, str]]) -> int:
        """For each ``(value, new_text)`` of an archived job: write ``new_text`` in place of
        ``value`` only if the stored text still equals ``value.text`` (compare and set; state
        keeps its version; nothing else of the archived job changes). Returns how many were
        written; the others changed meanwhile or are gone (purged). Never touches a live job.
        One transaction for the whole list where the backend has them. ``StoreDataError`` for
        a column outside ``STORED_VALUE_COLUMNS``. REQUIRED."""
        ...


CAPABILITIES: tuple[type, ...] = (
    RecurringJobStore,
    BatchStore,
    WorkflowConditionStore,
    SignalStore,
    ResourcePermitStore,
    FlowControlStore,
    LockStore,
    ArchiveStore,
    JobQueryStore,
    JobAnalyticsStore,
    QueueStatsStore,
    FairClaimStore,
    WorkerBatchStore,
    StreamingBulkStore,
    JobAuditStore,
    JobExtensionStore,
    SealedValueStore,
    SealedArchiveStore,
)
"""Every optional capability, in documentation order."""

MANDATORY: tuple[type, ...] = (
    JobCrudStore,
    JobClaimStore,
    JobTerminalStore,
    JobRetryStore,
    JobPauseStore,
    JobBatchStatusStore,
    JobBulkStore,
    NodeStore,
    TagStore,
)


@runtime_checkable
class SchemaManager(Protocol):
    """Schema migrations of a store (``ratchet db upgrade``). Not a TCK capability: a store
    whose schema needs no management need not implement it. Probe with
    ``store.capability(SchemaManager)``."""

    def upgrade(self, revision: str = "head") -> None:
        """Migrate the schema up to ``revision``. Idempotent."""
        ...

    def downgrade(self, revision: str) -> None:
        """Migrate down to ``revision`` (``"base"`` removes every Ratchet table)."""
        ...

    def current_revision(self) -> str | None:
        """The applied revision, or None for an empty database."""
        ...


__all__ = [
    "CAPABILITIES",
    "MANDATORY",
    "ArchiveStore",
    "BatchStore",
    "FlowControlStore",
    "JobAnalyticsStore",
    "JobAuditStore",
    "JobBatchStatusStore",
    "JobBulkStore",
    "JobClaimStore",
    "JobCrudStore",
    "JobExtensionStore",
    "SealedArchiveStore",
    "SealedValueStore",
    "JobPauseStore",
    "JobQueryStore",
    "JobRetryStore",
    "JobStore",
    "JobTerminalStore",
    "LockStore",
    "NodeStore",
    "FairClaimStore",
    "QueueStatsStore",
    "RecurringJobStore",
    "ResourcePermitStore",
    "SchemaManager",
    "SignalStore",
    "StreamingBulkStore",
    "TagStore",
    "WorkerBatchStore",
    "WorkflowConditionStore",
]
