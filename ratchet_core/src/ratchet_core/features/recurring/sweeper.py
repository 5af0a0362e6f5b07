"""The recurring sweep: every worker fires due recurring definitions, each slot exactly once.

There is no separate beat process and no leader. Every ``recurring.poll_interval`` each worker
reads the due definitions (``find_due_recurring``, judged by the store's clock) and, in chunks
of ``CHUNK`` definitions:

1. plans each definition's round from the definition as read (its ``next_fire_at`` = slot
   ``T``): which slots get a job and the next fire time (:func:`plan`, pure; misfire policy,
   catch-up bound and ``max_instances`` applied);
2. writes the slot jobs of the chunk with one ``bulk_insert``; each job's idempotency key is
   ``recurring:<id>@<slot>``, so a slot never gets a second job, whoever writes it;
3. moves each ``next_fire_at`` from ``T`` to the planned next time with
   ``advance_next_fire_many`` (a compare-and-set per definition: one worker wins ``T``, the
   others lose and do nothing more).

Writing the jobs before the compare-and-set is what makes a crash harmless: a worker that dies
between 2 and 3 leaves ``next_fire_at`` at ``T``, the next sweep (on any worker) writes the same
keyed jobs again (skipped: they exist) and advances. Workers racing on ``T`` all plan the same
keys because keys depend only on the definition as read, never on a worker's clock.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import attrs

from ratchet_api.errors import DuplicateJobError
from ratchet_api.model import TERMINAL_STATUSES, JobStatus
from ratchet_api.store.entities import (
    JobEntity,
    JobQuery,
    MisfirePolicy,
    RecurringAdvance,
    RecurringJobEntity,
)
from ratchet_api.store.protocols import (
    JobExtensionStore,
    JobQueryStore,
    JobStore,
    RecurringJobStore,
)
from ratchet_core.features.recurring.history import (
    MISFIRE_PROPERTY,
    MISFIRE_VALUE,
    MISSED_PROPERTY,
    POLICY_PROPERTY,
)
from ratchet_core.features.recurring.schedule import IntervalSchedule, Schedule, parse_schedule
from ratchet_core.features.recurring.settings import RecurringSettings
from ratchet_core.features.recurring.template import decode_template, job_for, run_tag

if TYPE_CHECKING:
    from ratchet_core.enqueue.submitter import Submitter

_log = logging.getLogger("ratchet.recurring")
_COUNT_CAP = 10_000
UNFINISHED = frozenset(s for s in JobStatus if s not in TERMINAL_STATUSES)


@attrs.frozen
class Plan:
    """One round of a definition: jobs for ``slots``, then ``next_fire_at``; ``late`` when the
    slot was missed (older than the grace), ``dropped`` missed slots that get no job."""

    slots: tuple[datetime, ...]
    next_fire_at: datetime
    late: bool
    dropped: int


def _count_between(schedule: Schedule, first: datetime, last: datetime) -> int:
    """Slots in ``[first, last]`` (``first`` is a slot); capped, for logs and metrics."""
    if first > last:
        return 0
    if isinstance(schedule, IntervalSchedule):
        return int((last - first) / schedule.interval) + 1
    count, slot = 0, first
    while slot <= last and count < _COUNT_CAP:
        count += 1
        slot = schedule.next_after(slot, first)
    return count


def plan(
    definition: RecurringJobEntity,
    schedule: Schedule,
    now: datetime,
    *,
    grace: timedelta,
    max_catch_up: int,
) -> Plan:
    """What to fire for a due definition at ``now`` (pure: no I/O, no clock).

    On time (``now - T <= grace``): a job for ``T``; next is the slot after ``T`` (a backlog
    within the grace fires slot by slot). Missed: ``SKIP`` fires nothing, ``FIRE_ONCE`` fires one
    job for ``T`` standing for every missed slot, both continue at the first slot after ``now``;
    ``FIRE_ALL`` fires every missed slot up to ``max_catch_up`` (oldest first) and continues
    after the last one, or after ``now`` when the bound cut the backlog."""
    first = definition.next_fire_at
    anchor = first
    if now - first <= grace:
        return Plan((first,), schedule.next_after(first, anchor), False, 0)
    following = schedule.next_after(now, anchor)
    policy = definition.misfire_policy
    if policy is MisfirePolicy.FIRE_ALL:
        slots: list[datetime] = []
        slot = first
        while slot <= now and len(slots) < max_catch_up:
            slots.append(slot)
            slot = schedule.next_after(slot, anchor)
        if slot <= now:  # the bound cut the backlog
            return Plan(tuple(slots), following, True, _count_between(schedule, slot, now))
        return Plan(tuple(slots), slot, True, 0)
    missed = _count_between(schedule, first, now)
    if policy is MisfirePolicy.SKIP:
        return Plan((), following, True, missed)
    return Plan((first,), following, True, missed - 1)


@attrs.frozen
class _Round:
    definition: RecurringJobEntity
    plan: Plan
    slots: tuple[datetime, ...]
    busy: int
    jobs: list[JobEntity]
    record: JobEntity | None = None
    """The never-run job recording a misfire round that fired nothing (history.py)."""


CHUNK = 50
"""Definitions fired together: one bulk insert and one batch of compare-and-sets."""


@attrs.frozen
class FireOutcome:
    fired: int = 0
    skipped: int = 0
    won: bool = False


MetricsHook = Callable[[str, str, int], None]
"""``(recurring_id, outcome, count)``; outcomes ``fired``, ``late``, ``skipped``."""


class RecurringSweeper:
    """Fires due recurring definitions of one store; ``sweep()`` does one pass (tests drive
    it directly with a controlled clock), ``start()`` runs passes on a daemon thread.
    Thread safe: any number of sweepers, in any processes, may sweep one store."""

    def __init__(
        self,
        store: JobStore,
        settings: RecurringSettings,
        *,
        on_fired: Callable[[], None] | None = None,
        metrics: MetricsHook | None = None,
        clock: Callable[[], datetime] | None = None,
        pipeline: Submitter | None = None,
    ) -> None:
        recurring = store.capability(RecurringJobStore)
        if recurring is None:
            raise ValueError(f"{type(store).__name__} lacks the RecurringJobStore capability")
        self._store = store
        self._recurring = recurring
        self._queries = store.capability(JobQueryStore)
        self._settings = settings
        self._on_fired = on_fired
        self._metrics = metrics
        self._clock = clock or store.server_now
        # fired jobs are sealed as every job is (``seal_fired``); None: as the template says
        self._pipeline = pipeline
        self._schedules: dict[tuple[str, str], Schedule] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ thread

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ratchet-recurring", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        interval = self._settings.poll_interval.total_seconds()
        while not self._stop.is_set():
            try:
                self.sweep()
            except Exception:  # noqa: BLE001 - the next pass tries again
                _log.warning("recurring sweep failed", exc_info=True)
            # a little jitter keeps the workers of a cluster from sweeping in lockstep
            if self._stop.wait(interval * random.uniform(0.8, 1.0)):
                return

    # ------------------------------------------------------------ one pass

    def sweep(self) -> int:
        """Fire every due definition (as many rounds as each needs); returns the number of
        jobs this sweeper wrote. Errors of one definition are logged and do not stop the
        others."""
        total = 0
        for _ in range(100):  # a sweep ends even if definitions keep falling due
            due = self._recurring.find_due_recurring(self._settings.batch_size)
            if not due:
                break
            now = self._clock()
            chunks = [due[i : i + CHUNK] for i in range(0, len(due), CHUNK)]
            random.shuffle(chunks)  # workers racing on one batch mostly take different chunks
            progressed = False
            for chunk in chunks:
                if self._stop.is_set():  # the worker is stopping: the rest is for others
                    break
                outcome = self.fire_many(chunk, now)
                total += outcome.fired
                progressed = progressed or outcome.won
            if not progressed or self._stop.is_set():
                break
        if total and self._on_fired is not None:
            self._on_fired()
        return total

    def schedule_of(self, definition: RecurringJobEntity) -> Schedule:
        key = (definition.cron, definition.timezone)
        schedule = self._schedules.get(key)
        if schedule is None:
            schedule = parse_schedule(definition.cron, definition.timezone)
            self._schedules[key] = schedule
        return schedule

    def fire(self, definition: RecurringJobEntity, now: datetime | None = None) -> FireOutcome:
        """One round of one due definition at ``now`` (default: the clock)."""
        return self.fire_many([definition], now)

    def fire_many(
        self, definitions: Sequence[RecurringJobEntity], now: datetime | None = None
    ) -> FireOutcome:
        """One round of each due definition at ``now`` (default: the clock): write the slot
        jobs of all of them (one bulk insert), then advance all of them (one batch of
        compare-and-sets). ``won`` is true if any advance applied."""
        now = now if now is not None else self._clock()
        rounds: list[_Round] = []
        jobs: list[JobEntity] = []
        for definition in definitions:
            if definition.next_fire_at > now or not definition.enabled:
                continue
            try:
                planned = self._plan(definition, now)
            except Exception:  # noqa: BLE001 - one bad definition must not stop the rest
                _log.warning("recurring job %r could not fire", definition.name, exc_info=True)
                continue
            rounds.append(planned)
            jobs.extend(planned.jobs)
        if not rounds:
            return FireOutcome()
        written = self._write(jobs) if jobs else 0
        records = [r.record for r in rounds if r.record is not None]
        if records:
            self._write(records)
        for r in rounds:
            if r.plan.late:
                self._mark_misfire(r)
        won = self._recurring.advance_next_fire_many(
            [
                RecurringAdvance(
                    name=r.definition.name,
                    expected_fire_at=r.definition.next_fire_at,
                    next_fire_at=r.plan.next_fire_at,
                )
                for r in rounds
            ]
        )
        # a lost advance: another worker took the slot (the keys kept its job single)
        skipped = 0
        for r in rounds:
            if r.definition.name in won:
                skipped += r.plan.dropped + r.busy
                self._report(r)
        return FireOutcome(fired=written, skipped=skipped, won=bool(won))

    def _plan(self, definition: RecurringJobEntity, now: datetime) -> _Round:
        template = decode_template(definition)
        p = plan(
            definition,
            self.schedule_of(definition),
            now,
            grace=self._settings.misfire_grace,
            max_catch_up=self._settings.max_catch_up,
        )
        slots = p.slots
        busy = 0
        if slots and template.max_instances is not None:
            free = max(0, template.max_instances - self._unfinished(definition.name))
            busy = len(slots) - min(free, len(slots))
            slots = slots[:free]
        jobs = [job_for(definition, template, slot=s, now=now) for s in slots]
        record = None
        if p.late and not jobs:
            # a misfire that fires nothing (SKIP, or max_instances busy): its record is a job
            # for the missed slot that never runs (keyed as the slot's job: one per round)
            record = attrs.evolve(
                job_for(definition, template, slot=definition.next_fire_at, now=now),
                status=JobStatus.CANCELLED,
                finished_at=now,
                last_error=(
                    f"misfire: {p.dropped + busy} slot(s) from "
                    f"{definition.next_fire_at.isoformat()} skipped (misfire policy "
                    f"{definition.misfire_policy.value}"
                    + (f", max_instances: {busy} still running" if busy else "")
                    + f"); next at {p.next_fire_at.isoformat()}"
                ),
            )
        if self._pipeline is not None:
            seal = self._pipeline.seal_fired
            jobs = [seal(job, template.invocation, definition.name) for job in jobs]
            if record is not None:
                record = seal(record, template.invocation, definition.name)
        return _Round(definition, p, slots, busy, jobs, record)

    def _mark_misfire(self, r: _Round) -> None:
        """Mark the first job of a misfire round (history.py): write-once properties, so
        racing sweepers of the same round write them once; best effort (a store without
        ``JobExtensionStore`` keeps the log line and the metric only)."""
        ext = self._store.capability(JobExtensionStore)
        first = r.jobs[0] if r.jobs else r.record
        if ext is None or first is None:
            return
        key = first.idempotency_key
        try:
            stored = self._store.find_by_idempotency_key(key) if key else None
            if stored is None:
                return
            missed = r.plan.dropped + r.busy
            ext.put_property(stored.id, MISFIRE_PROPERTY, MISFIRE_VALUE)
            ext.put_property(stored.id, MISSED_PROPERTY, str(missed))
            ext.put_property(stored.id, POLICY_PROPERTY, r.definition.misfire_policy.value)
        except Exception:  # noqa: BLE001 - the firing itself is done; the mark is best effort
            _log.warning("recurring job %r: misfire not recorded", r.definition.name, exc_info=True)

    def _write(self, jobs: list[JobEntity]) -> int:
        """Write the slot jobs (existing keys skipped); the number actually written."""
        try:
            return self._store.bulk_insert(jobs)
        except DuplicateJobError:
            # a racing worker wrote one of these slots between the store's key check and its
            # insert: write job by job, a key written concurrently already has its job
            written = 0
            for job in jobs:
                try:
                    written += self._store.insert_job(job).id == job.id
                except DuplicateJobError:
                    continue
            return written

    def _unfinished(self, recurring_id: str) -> int:
        if self._queries is None:
            return 0
        return self._queries.count_jobs(
            JobQuery(tag=run_tag(recurring_id), statuses=UNFINISHED, limit=1)
        )

    def _report(self, r: _Round) -> None:
        name, p, slots, busy = r.definition.name, r.plan, r.slots, r.busy
        skipped = p.dropped + busy
        if slots:
            self._metric(name, "late" if p.late else "fired", len(slots))
            log = _log.warning if p.late else _log.debug
            log(
                "recurring job %r fired %d slot(s) from %s%s; next at %s",
                name,
                len(slots),
                slots[0].isoformat(),
                " (misfire: late beyond recurring.misfire_grace)" if p.late else "",
                p.next_fire_at.isoformat(),
            )
        if skipped:
            self._metric(name, "skipped", skipped)
            (_log.warning if p.dropped else _log.info)(
                "recurring job %r skipped %d slot(s)%s%s; next at %s",
                name,
                skipped,
                f" (misfire policy {r.definition.misfire_policy.value})" if p.dropped else "",
                f" (max_instances: {busy} still running)" if busy else "",
                p.next_fire_at.isoformat(),
            )

    def _metric(self, name: str, outcome: str, count: int) -> None:
        if self._metrics is None:
            return
        try:
            self._metrics(name, outcome, count)
        except Exception:  # noqa: BLE001 - metrics are best effort
            _log.debug("recurring metric failed", exc_info=True)


__all__ = ["FireOutcome", "Plan", "RecurringSweeper", "plan"]
