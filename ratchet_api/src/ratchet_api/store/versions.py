"""The version of the store SPI, how a store declares the version it implements, and what each
version added.

The store SPI is versioned ``major.minor``:

* a **minor** version only adds: a method of a mandatory protocol the engine can do without
  (it adapts a store at an older minor version with a fallback that keeps that version's
  guarantees, and names the features the fallback cannot provide), a new optional capability,
  or a method of a capability the engine then stops probing on an older store;
* a **major** version changes or removes something the engine cannot adapt; the engine refuses
  a store of a major version it does not implement.

A store declares the version it implements with the class (or instance) attribute
``ratchet_store_spi``, a ``(major, minor)`` pair; a store that declares nothing (every store
written for the first release) is taken to implement ``1.0``. ``docs/stores/changelog.md``
lists every change with what a store must do to move up.
"""

from __future__ import annotations

from typing import Final, NamedTuple

import attrs

from ratchet_api.errors import StoreSpiVersionError


class SpiVersion(NamedTuple):
    """A store SPI version; compares as the tuple ``(major, minor)``."""

    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


SPI_1_0: Final = SpiVersion(1, 0)
"""The first release (every store that declares no version)."""
SPI_1_1: Final = SpiVersion(1, 1)
"""The second wave: started marks, the recovery cutoff, release with ``run_at`` and
``unless_dispatched``, ``settle_children``, integer priorities, grown capabilities."""

STORE_SPI: Final = SPI_1_1
"""The store SPI version this ``ratchet-api`` defines (the protocols of
``ratchet_api.store.protocols``)."""

KNOWN_VERSIONS: Final[tuple[SpiVersion, ...]] = (SPI_1_0, SPI_1_1)
"""Every version released so far, oldest first."""

STORE_SPI_ATTRIBUTE: Final = "ratchet_store_spi"
"""The attribute a store declares its version with: ``ratchet_store_spi = (1, 1)``."""

MIGRATION_GUIDE: Final = "docs/stores/changelog.md"
"""Where a store author reads what changed between versions and how to move up."""


@attrs.frozen(kw_only=True)
class SpiChange:
    """One change of the store SPI: what a store at ``version`` must provide, what the engine
    does for a store at an older version, and which features that store loses."""

    version: SpiVersion
    """The version that introduced the change."""
    member: str
    """``Protocol.method`` (or ``Protocol`` for a new capability, or a rule)."""
    change: str
    """What changed, for a store author."""
    fallback: str
    """What the engine does for a store at an older version (its guarantees are kept)."""
    lost: str
    """What such a store loses: the feature named in the log and in ``ratchet health``."""


SPI_CHANGES: Final[tuple[SpiChange, ...]] = (
    SpiChange(
        version=SPI_1_1,
        member="JobClaimStore.mark_dispatched",
        change="new mandatory method: record that the worker started running a claim "
        "(dispatched_at), return the claims still current",
        fallback="every claim counts as started (recovery charges the attempt, as in 1.0); the "
        "worker reads each claim back with find_by_id and skips one superseded before it starts",
        lost="started marks: recovering a claim that never started (prefetched jobs of a dead "
        "worker, a stale claim) charges its attempt",
    ),
    SpiChange(
        version=SPI_1_1,
        member="JobBulkStore.reset_orphan_jobs",
        change="new required argument heartbeat_before: reset only jobs whose node (and job) "
        "did not heartbeat since the cutoff, checked atomically with the reset; the attempt of "
        "a claim never dispatched is given back",
        fallback="the engine re-reads node heartbeats just before the 1.0 reset and spares every "
        "node that heartbeat since the cutoff; the attempt stays counted",
        lost="the recovery cutoff: a node that heartbeats or claims again between the engine's "
        "re-read and the reset can lose its running jobs (the documented 1.0 race)",
    ),
    SpiChange(
        version=SPI_1_1,
        member="JobBatchStatusStore.release_claim",
        change="new keyword run_at (due again only then) and unless_dispatched (refused once "
        "the claim was marked started); the release also clears started_at, heartbeat_at and "
        "dispatched_at",
        fallback="with run_at: schedule_retry due at run_at (fenced; the attempt stays counted, "
        "as 1.0 workers did for an open circuit); with unless_dispatched: refused (every claim "
        "counts as started), so recovery retries the job with its attempt counted",
        lost="giving back a job refused by an open circuit breaker without charging its attempt "
        "(max_retries also bounds circuit rejections)",
    ),
    SpiChange(
        version=SPI_1_1,
        member="JobBatchStatusStore.settle_children",
        change="new mandatory method: move WAITING workflow children in one atomic, idempotent "
        "unit (PENDING, AWAITING_SIGNAL with a deadline, or CANCELLED)",
        fallback="none can keep its all-or-none guarantee: the engine does not advertise "
        "WorkflowConditionStore for the store, so a workflow with steps is refused at enqueue "
        "(UnsupportedCapabilityError)",
        lost="workflow steps and callbacks (then, branch, on_success, on_failure)",
    ),
    SpiChange(
        version=SPI_1_1,
        member="JobClaimStore.claim_next_batch",
        change="priorities are any int of -100..100 (JobPriority LOW -50, NORMAL 0, HIGH 50, "
        "CRITICAL 100), claimed highest first and compared exactly",
        fallback="every priority is rounded to the nearest named point before the store sees it "
        "(a 1.0 store was promised JobPriority members only); the order between bands is kept",
        lost="integer priorities between the named points (jobs within one band are claimed "
        "by due time)",
    ),
    SpiChange(
        version=SPI_1_1,
        member="JobEntity.workflow, JobEntity.flow_control, JobEntity.dispatched_at",
        change="new job fields: a store keeps workflow and flow_control as written and "
        "dispatched_at as mark_dispatched sets it (claims clear it)",
        fallback="a 1.0 store drops them: workflow steps are disabled (above), and a job's "
        "flow-control options read back as none",
        lost="resource permit counts and rate limits (.resource(key, permits=N), "
        ".rate_limit): jobs run without them",
    ),
    SpiChange(
        version=SPI_1_1,
        member="RecurringJobStore.advance_next_fire_many",
        change="new method of the capability: many fire-time compare-and-sets in one unit of work",
        fallback="one advance_next_fire per definition (each compare-and-set is independent "
        "anyway)",
        lost="nothing but round trips: the recurring sweep writes one CAS per definition",
    ),
    SpiChange(
        version=SPI_1_1,
        member="BatchStore",
        change="new methods insert_batch, add_batch_jobs, find_batches, recount_batch, "
        "record_batch_error; a child's terminal write counts it in its batch",
        fallback="a BatchStore without them is not advertised",
        lost="batches and streaming batches",
    ),
    SpiChange(
        version=SPI_1_1,
        member="SignalStore",
        change="expire_signal takes the status to expire to; new find_jobs_by_signal_key",
        fallback="a SignalStore without them is not advertised",
        lost="await_signal and scheduler.signal",
    ),
    SpiChange(
        version=SPI_1_1,
        member="ArchiveStore",
        change="archive_finished_before takes statuses; new delete_archived_before",
        fallback="an ArchiveStore without them is not advertised",
        lost="retention (finished jobs are never archived nor purged by age)",
    ),
    SpiChange(
        version=SPI_1_1,
        member="FlowControlStore",
        change="new capability: defer_claim and acquire_rate",
        fallback="not advertised by a 1.0 store",
        lost="resource permits and rate limits",
    ),
    SpiChange(
        version=SPI_1_1,
        member="QueueStatsStore",
        change="new capability (third wave): queue_stats, the queue figures (pending, due, "
        "oldest due, running, finished since) per execution target, job target and priority "
        "band in one read",
        fallback="the engine scans the newest jobs through JobQueryStore (QueueStats.exact "
        "False: the figures of the rows scanned)",
        lost="exact queue figures on large queues (Prometheus gauges, the dashboard's queues page)",
    ),
    SpiChange(
        version=SPI_1_1,
        member="FairClaimStore, JobEntity.fairness_key",
        change="new capability (third wave): claims_fairly; a new job field fairness_key the "
        "store keeps as written, and claims that interleave the keys of due jobs of equal "
        "priority (round robin by each job's rank within its priority and key)",
        fallback="the engine warns once that the store claims in the plain order; a store "
        "that does not keep the field reads it back as None",
        lost="fairness under load: one key's backlog delays the jobs of every other key",
    ),
    SpiChange(
        version=SPI_1_1,
        member="WorkerBatchStore",
        change="new capability (third wave): claim_and_start (the claim marks the jobs that "
        "start at once as started, in the same statement) and write_failures (many fenced "
        "retry and dead-letter writes in one round trip)",
        fallback="claim_next_batch, then the worker's batched mark_dispatched for jobs that "
        "start; one schedule_retry or mark_failed_terminal per failed job",
        lost="nothing but round trips: a started mark written after the start (a job that "
        "kills its worker before it is written is given its attempt back once), one statement "
        "per failed job",
    ),
    SpiChange(
        version=SPI_1_1,
        member="StreamingBulkStore",
        change="new capability (third wave): bulk_insert_parts, a bulk insert whose jobs "
        "arrive in parts the store may write before it reads the next (one atomic unit; an "
        "exception from the parts writes nothing)",
        fallback="the engine builds every job of a bulk enqueue, then calls bulk_insert once",
        lost="nothing but time: the store cannot write while a large enqueue_many is built",
    ),
    SpiChange(
        version=SPI_1_1,
        member="SealedValueStore",
        change="new capability: scan_values and replace_values",
        fallback="not advertised by a 1.0 store",
        lost="ratchet keys rotate and ratchet keys status",
    ),
    SpiChange(
        version=SPI_1_1,
        member="SealedArchiveStore",
        change="new capability (third wave): scan_archived_values and replace_archived_values, "
        "the SealedValueStore contract over archived jobs",
        fallback="ratchet keys rotate and ratchet keys status cover live jobs only and say that "
        "the archive was not covered",
        lost="re-sealing archived jobs: their values stay under the key they were sealed with, "
        "which must stay configured until retention purges them",
    ),
)
"""Every change since the first release, oldest first (``docs/stores/changelog.md`` has the
same with diffs)."""


def changes_since(version: SpiVersion) -> tuple[SpiChange, ...]:
    """The changes a store implementing ``version`` lacks (those of later versions up to
    ``STORE_SPI``)."""
    return tuple(c for c in SPI_CHANGES if version < c.version <= STORE_SPI)


def parse_spi_version(value: object) -> SpiVersion:
    """``value`` (``(1, 1)``, ``[1, 1]``, ``"1.1"`` or a ``SpiVersion``) as a ``SpiVersion``.

    ``StoreSpiVersionError`` for anything else (a bool, negative numbers, one number, text that
    is not ``major.minor``)."""
    if isinstance(value, str):
        major_text, dot, minor_text = value.strip().partition(".")
        if dot and major_text.isdigit() and minor_text.isdigit():
            return SpiVersion(int(major_text), int(minor_text))
    elif isinstance(value, tuple | list) and len(value) == 2:
        major, minor = value
        if all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in (major, minor)):
            return SpiVersion(int(major), int(minor))
    raise StoreSpiVersionError(
        f"a store SPI version is a (major, minor) pair of non-negative ints such as (1, 1) or "
        f"the text '1.1', got {value!r}"
    )


def declared_spi_version(store: object) -> SpiVersion:
    """The version ``store`` declares with ``ratchet_store_spi``; ``1.0`` when it declares
    none. ``StoreSpiVersionError`` naming the store's class for a malformed declaration."""
    declared = getattr(store, STORE_SPI_ATTRIBUTE, None)
    if declared is None:
        return SPI_1_0
    try:
        return parse_spi_version(declared)
    except StoreSpiVersionError as exc:
        raise StoreSpiVersionError(
            f"{type(store).__name__}.{STORE_SPI_ATTRIBUTE} is malformed: {exc}"
        ) from None


__all__ = [
    "KNOWN_VERSIONS",
    "MIGRATION_GUIDE",
    "SPI_1_0",
    "SPI_1_1",
    "SPI_CHANGES",
    "STORE_SPI",
    "STORE_SPI_ATTRIBUTE",
    "SpiChange",
    "SpiVersion",
    "changes_since",
    "declared_spi_version",
    "parse_spi_version",
]
