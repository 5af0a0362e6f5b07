# (capabilities are probed by passing their Protocol class: store.capability(LockStore))
"""Capability contracts of scheduling: recurring definitions, batches, workflow conditions,
signals."""

from __future__ import annotations

from datetime import datetime, timedelta

import attrs
import pytest

from ratchet_api.errors import DuplicateJobError, InvalidStateTransitionError, StoreDataError
from ratchet_api.ids import uuid7
from ratchet_api.model import JobPriority, JobStatus
from ratchet_api.store.entities import (
    BatchEntity,
    BatchStatus,
    Completion,
    ConditionKind,
    JobEntity,
    RecurringAdvance,
    RecurringJobEntity,
    WorkflowConditionEntity,
)
from ratchet_api.store.protocols import (
    BatchStore,
    RecurringJobStore,
    SignalStore,
    WorkflowConditionStore,
)
from ratchet_api.store.versions import SPI_1_1
from ratchet_tck.contracts.base import StoreContract, assert_same_instant, wait_until
from ratchet_tck.contracts.base_race import race
from ratchet_tck.fixture import StoreFixture, now_ms
from ratchet_tck.versions import spi


def _recurring(name: str, fire_in: timedelta, enabled: bool = True) -> RecurringJobEntity:
    return RecurringJobEntity(
        name=name,
        cron="*/5 * * * *",
        timezone="Europe/Paris",
        target="ratchet_tck.sample:noop",
        next_fire_at=now_ms() + fire_in,
        enabled=enabled,
        created_at=now_ms(),
    )


def _due(rec: RecurringJobStore, *names: str) -> dict[str, datetime]:
    """Save a definition per name, due a second ago; their fire times as stored (what a
    compare-and-set must expect), by name."""
    for name in names:
        rec.save_recurring(_recurring(name, timedelta(seconds=-1)))
    fire: dict[str, datetime] = {}
    for name in names:
        current = rec.find_recurring(name)
        assert current is not None, name
        fire[name] = current.next_fire_at
    return fire


def _advance(name: str, expected: datetime, following: datetime) -> RecurringAdvance:
    return RecurringAdvance(name=name, expected_fire_at=expected, next_fire_at=following)


def _claimed_children(
    fixture: StoreFixture, batches: BatchStore, name: str, size: int
) -> tuple[BatchEntity, list[JobEntity]]:
    """A SEALED batch of ``size`` children, all claimed by ``tck-node`` (CRITICAL, so they are
    claimed ahead of any other pending job); the claimed children in insertion order."""
    batch = BatchEntity(name=name, status=BatchStatus.SEALED, total=size)
    jobs = [
        fixture.new_pending_job(batch_id=batch.id, priority=JobPriority.CRITICAL)
        for _ in range(size)
    ]
    batches.insert_batch(batch, jobs)
    claimed = {j.id: j for j in fixture.store().claim_next_batch("tck-node", 50)}
    return batch, [claimed[j.id] for j in jobs]


class RecurringJobStoreContract(StoreContract):
    """Definitions by name; due ones earliest first; one caller wins each fire time."""

    capability = RecurringJobStore
    summary = "save/replace/list/delete, due order, fire-time CAS (single and batched) and its race"

    def test_save_find_replace_delete(self, tck_fixture: StoreFixture) -> None:
        rec = self.cap(tck_fixture, RecurringJobStore)
        saved = _recurring("tck-report", timedelta(minutes=5))
        rec.save_recurring(saved)
        found = rec.find_recurring("tck-report")
        assert found is not None
        assert (found.cron, found.timezone, found.target) == (
            saved.cron,
            saved.timezone,
            saved.target,
        )
        assert_same_instant(found.next_fire_at, saved.next_fire_at, "next_fire_at")
        rec.save_recurring(_recurring("tck-report", timedelta(minutes=5), enabled=False))
        replaced = rec.find_recurring("tck-report")
        assert replaced is not None and replaced.enabled is False
        assert [r.name for r in rec.list_recurring()] == ["tck-report"]
        assert rec.delete_recurring("tck-report") is True
        assert rec.find_recurring("tck-report") is None
        assert rec.delete_recurring("tck-report") is False

    def test_list_is_ordered_by_name(self, tck_fixture: StoreFixture) -> None:
        rec = self.cap(tck_fixture, RecurringJobStore)
        for name in ("tck-c", "tck-a", "tck-b"):
            rec.save_recurring(_recurring(name, timedelta(minutes=1)))
        assert [r.name for r in rec.list_recurring()] == ["tck-a", "tck-b", "tck-c"]

    def test_find_due_recurring_enabled_earliest_first(self, tck_fixture: StoreFixture) -> None:
        rec = self.cap(tck_fixture, RecurringJobStore)
        rec.save_recurring(_recurring("tck-late", timedelta(seconds=-10)))
        rec.save_recurring(_recurring("tck-early", timedelta(seconds=-60)))
        rec.save_recurring(_recurring("tck-off", timedelta(seconds=-90), enabled=False))
        rec.save_recurring(_recurring("tck-future", timedelta(hours=1)))
        assert [r.name for r in rec.find_due_recurring(10)] == ["tck-early", "tck-late"]
        assert [r.name for r in rec.find_due_recurring(1)] == ["tck-early"]

    def test_advance_next_fire_is_a_compare_and_set(self, tck_fixture: StoreFixture) -> None:
        rec = self.cap(tck_fixture, RecurringJobStore)
        fire = _due(rec, "tck-cas")["tck-cas"]
        following = fire + timedelta(minutes=5)
        assert rec.advance_next_fire("tck-cas", fire - timedelta(seconds=1), following) is False
        assert rec.advance_next_fire("tck-cas", fire, following) is True
        moved = rec.find_recurring("tck-cas")
        assert moved is not None
        assert_same_instant(moved.next_fire_at, following, "next_fire_at")
        assert_same_instant(moved.last_fired_at, fire, "last_fired_at")
        assert rec.advance_next_fire("tck-cas", fire, following) is False
        assert rec.advance_next_fire("tck-absent", fire, following) is False

    def test_one_of_many_racing_nodes_wins_a_fire_time(self, tck_fixture: StoreFixture) -> None:
        rec = self.cap(tck_fixture, RecurringJobStore)
        fire = _due(rec, "tck-race")["tck-race"]
        wins = race(
            8, lambda i: rec.advance_next_fire("tck-race", fire, fire + timedelta(minutes=i + 1))
        )
        assert wins.count(True) == 1

    @spi(since=SPI_1_1)
    def test_advance_many_applies_each_compare_and_set_on_its_own(
        self, tck_fixture: StoreFixture
    ) -> None:
        rec = self.cap(tck_fixture, RecurringJobStore)
        fire = _due(rec, "tck-m-a", "tck-m-b", "tck-m-c")
        later = timedelta(minutes=5)
        won = rec.advance_next_fire_many(
            [
                _advance("tck-m-c", fire["tck-m-c"], fire["tck-m-c"] + later),
                _advance("tck-m-a", fire["tck-m-a"], fire["tck-m-a"] + later),
                # stale: someone else already moved it
                _advance(
                    "tck-m-b", fire["tck-m-b"] - timedelta(seconds=1), fire["tck-m-b"] + later
                ),
                _advance("tck-m-absent", fire["tck-m-a"], fire["tck-m-a"] + later),
            ]
        )
        assert won == {"tck-m-a", "tck-m-c"}
        for name, moved in (("tck-m-a", True), ("tck-m-b", False), ("tck-m-c", True)):
            current = rec.find_recurring(name)
            assert current is not None
            expected = fire[name] + later if moved else fire[name]
            assert_same_instant(current.next_fire_at, expected, f"{name}.next_fire_at")
            if moved:
                assert_same_instant(current.last_fired_at, fire[name], f"{name}.last_fired_at")
        assert rec.advance_next_fire_many([]) == set()

    @spi(since=SPI_1_1)
    def test_racing_batches_win_each_fire_time_once_without_deadlock(
        self, tck_fixture: StoreFixture
    ) -> None:
        rec = self.cap(tck_fixture, RecurringJobStore)
        names = [f"tck-mr-{i}" for i in range(6)]
        fire = _due(rec, *names)

        def batch(i: int) -> set[str]:
            order = names[i % len(names) :] + names[: i % len(names)]  # each caller its own order
            return rec.advance_next_fire_many(
                [_advance(n, fire[n], fire[n] + timedelta(minutes=i + 1)) for n in order]
            )

        results = race(8, batch)
        for name in names:
            assert sum(name in won for won in results) == 1, name


class BatchStoreContract(StoreContract):
    """Batch totals, sealing, counted children (no lost increments) and one completion."""

    capability = BatchStore
    summary = (
        "totals, seal, atomic increments under 8 threads, single completion, batch + jobs in "
        "one unit of work, idempotent chunks, children counted by their terminal writes"
    )

    def test_save_and_find(self, tck_fixture: StoreFixture) -> None:
        batches = self.cap(tck_fixture, BatchStore)
        parent = tck_fixture.store().insert_job(tck_fixture.new_batch_parent_job())
        batch = batches.save_batch(BatchEntity(name="tck-import", parent_job_id=parent.id))
        found = batches.find_batch(batch.id)
        assert found is not None
        assert (found.name, found.status, found.total, found.parent_job_id) == (
            "tck-import",
            BatchStatus.OPEN,
            0,
            parent.id,
        )
        assert batches.find_batch(uuid7()) is None

    def test_totals_grow_only_while_open(self, tck_fixture: StoreFixture) -> None:
        batches = self.cap(tck_fixture, BatchStore)
        batch = batches.save_batch(BatchEntity(name="tck-stream"))
        assert batches.add_to_total(batch.id, 3).total == 3
        assert batches.add_to_total(batch.id, 4).total == 7
        assert batches.seal_batch(batch.id) is True
        assert batches.seal_batch(batch.id) is False
        with pytest.raises(InvalidStateTransitionError):
            batches.add_to_total(batch.id, 1)
        found = batches.find_batch(batch.id)
        assert found is not None and (found.total, found.status) == (7, BatchStatus.SEALED)

    def test_increment_finished_counts_success_and_failure(self, tck_fixture: StoreFixture) -> None:
        batches = self.cap(tck_fixture, BatchStore)
        batch = batches.save_batch(BatchEntity(name="tck-count", total=3))
        assert batches.increment_finished(batch.id, True).succeeded == 1
        progress = batches.increment_finished(batch.id, False)
        assert (progress.succeeded, progress.failed) == (1, 1)
        progress = batches.increment_finished(batch.id, True)
        assert (progress.succeeded, progress.failed, progress.finished) == (2, 1, 3)

    def test_concurrent_increments_never_lose_a_count(self, tck_fixture: StoreFixture) -> None:
        batches = self.cap(tck_fixture, BatchStore)
        batch = batches.save_batch(BatchEntity(name="tck-race", total=200))

        def finish_25(i: int) -> None:
            for n in range(25):
                batches.increment_finished(batch.id, (i + n) % 4 != 0)

        race(8, finish_25)
        found = batches.find_batch(batch.id)
        assert found is not None
        assert found.finished == 200, f"lost {200 - found.finished} of 200 increments"
        assert found.failed == 50

    def test_complete_only_when_sealed_and_finished(self, tck_fixture: StoreFixture) -> None:
        batches = self.cap(tck_fixture, BatchStore)
        batch = batches.save_batch(BatchEntity(name="tck-done"))
        batches.add_to_total(batch.id, 2)
        batches.increment_finished(batch.id, True)
        batches.increment_finished(batch.id, True)
        assert batches.mark_batch_complete_if_ready(batch.id) is False, "still OPEN"
        assert batches.seal_batch(batch.id)
        assert batches.mark_batch_complete_if_ready(batch.id) is True
        done = batches.find_batch(batch.id)
        assert done is not None and done.status is BatchStatus.COMPLETED
        assert done.completed_at is not None
        assert batches.mark_batch_complete_if_ready(batch.id) is False

    def test_unfinished_sealed_batch_does_not_complete(self, tck_fixture: StoreFixture) -> None:
        batches = self.cap(tck_fixture, BatchStore)
        batch = batches.save_batch(BatchEntity(name="tck-wait", total=2))
        assert batches.seal_batch(batch.id)
        batches.increment_finished(batch.id, False)
        assert batches.mark_batch_complete_if_ready(batch.id) is False
        found = batches.find_batch(batch.id)
        assert found is not None and found.status is BatchStatus.SEALED

    def test_one_of_many_racing_callers_completes(self, tck_fixture: StoreFixture) -> None:
        batches = self.cap(tck_fixture, BatchStore)
        batch = batches.save_batch(BatchEntity(name="tck-once", total=1))
        assert batches.seal_batch(batch.id)
        batches.increment_finished(batch.id, True)
        wins = race(8, lambda _: batches.mark_batch_complete_if_ready(batch.id))
        assert wins.count(True) == 1

    @spi(since=SPI_1_1)
    def test_insert_batch_writes_the_batch_and_its_jobs_together(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        batches = self.cap(tck_fixture, BatchStore)
        batch = BatchEntity(name="tck-atomic", status=BatchStatus.SEALED, total=2)
        jobs = [tck_fixture.new_pending_job(batch_id=batch.id) for _ in range(2)]
        assert batches.insert_batch(batch, jobs) == 2
        found = batches.find_batch(batch.id)
        assert found is not None and (found.total, found.status) == (2, BatchStatus.SEALED)
        assert all(self.reload(store, j).batch_id == batch.id for j in jobs)

        existing = self.insert(tck_fixture)
        clash = BatchEntity(name="tck-atomic-clash", total=2)
        fresh = tck_fixture.new_pending_job(batch_id=clash.id)
        with pytest.raises(DuplicateJobError):
            batches.insert_batch(clash, [fresh, attrs.evolve(existing, batch_id=clash.id)])
        assert batches.find_batch(clash.id) is None, "the batch survived its jobs' failure"
        assert store.find_by_id(fresh.id) is None, "a job survived its batch's failure"

    @spi(since=SPI_1_1)
    def test_chunks_skip_existing_keys_and_count_only_what_they_insert(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        batches = self.cap(tck_fixture, BatchStore)
        batch = batches.save_batch(BatchEntity(name="tck-chunks"))

        def chunk(first: int, last: int) -> list[JobEntity]:
            return [
                tck_fixture.new_pending_job(
                    batch_id=batch.id, idempotency_key=f"tck-chunk:{batch.id}:{i}"
                )
                for i in range(first, last)
            ]

        assert batches.add_batch_jobs(batch.id, chunk(0, 3)) == 3
        assert batches.add_batch_jobs(batch.id, chunk(2, 5)) == 2, "replayed items inserted"
        found = batches.find_batch(batch.id)
        assert found is not None and found.total == 5
        assert batches.seal_batch(batch.id)
        with pytest.raises(InvalidStateTransitionError):
            batches.add_batch_jobs(batch.id, chunk(5, 6))
        assert store.find_by_idempotency_key(f"tck-chunk:{batch.id}:5") is None
        with pytest.raises(InvalidStateTransitionError):
            batches.add_batch_jobs(uuid7(), chunk(7, 8))

    @spi(since=SPI_1_1)
    def test_terminal_transitions_count_children_in_their_batch(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        batches = self.cap(tck_fixture, BatchStore)
        batch, mine = _claimed_children(tck_fixture, batches, "tck-progress", 5)
        done = store.mark_succeeded_many(
            [Completion(job_id=j.id, claim_seq=j.claim_seq) for j in mine[:2]]
        )
        assert done == {mine[0].id, mine[1].id}
        assert store.mark_succeeded(mine[2].id, mine[2].claim_seq, None)
        assert store.mark_failed_terminal(mine[3].id, mine[3].claim_seq, "boom")
        assert store.cancel_job(mine[4].id)
        # transitions that do not apply count nothing
        assert not store.mark_succeeded(mine[2].id, mine[2].claim_seq, None)
        assert not store.mark_succeeded_many([Completion(job_id=mine[0].id, claim_seq=1)])
        assert not store.cancel_job(mine[4].id)
        found = batches.find_batch(batch.id)
        assert found is not None
        assert (found.succeeded, found.failed, found.pending) == (3, 2, 0)
        assert batches.mark_batch_complete_if_ready(batch.id)

    @spi(since=SPI_1_1)
    def test_last_children_finishing_together_complete_the_batch_once(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        batches = self.cap(tck_fixture, BatchStore)
        batch, mine = _claimed_children(tck_fixture, batches, "tck-last-two", 8)

        def finish(i: int) -> bool:
            job = mine[i]
            if i % 2:
                store.mark_succeeded_many([Completion(job_id=job.id, claim_seq=job.claim_seq)])
            else:
                store.mark_failed_terminal(job.id, job.claim_seq, "boom")
            return batches.mark_batch_complete_if_ready(batch.id)

        wins = race(8, finish)
        assert wins.count(True) == 1, f"completion fired {wins.count(True)} times"
        found = batches.find_batch(batch.id)
        assert found is not None and (found.succeeded, found.failed) == (4, 4)

    @spi(since=SPI_1_1)
    def test_recount_repairs_lost_counts_and_never_lowers_them(
        self, tck_fixture: StoreFixture
    ) -> None:
        batches = self.cap(tck_fixture, BatchStore)
        # children written as already finished: no terminal transition counted them, as if
        # the process died between a child's write and its batch's count
        lost = BatchEntity(name="tck-recount", status=BatchStatus.SEALED, total=4)
        statuses = [JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.PENDING]
        batches.insert_batch(
            lost,
            [tck_fixture.new_pending_job(batch_id=lost.id, status=st) for st in statuses],
        )
        found = batches.recount_batch(lost.id)
        assert found is not None and (found.succeeded, found.failed) == (1, 2)
        assert found.pending == 1
        counted = batches.save_batch(BatchEntity(name="tck-recount-2", total=3))
        batches.increment_finished(counted.id, True)
        kept = batches.recount_batch(counted.id)
        assert kept is not None and kept.succeeded == 1, "recount lowered a count"
        assert batches.recount_batch(uuid7()) is None

    @spi(since=SPI_1_1)
    def test_find_batches_newest_first_by_status_and_record_error(
        self, tck_fixture: StoreFixture
    ) -> None:
        batches = self.cap(tck_fixture, BatchStore)
        older = batches.save_batch(BatchEntity(name="tck-old", created_at=now_ms()))
        newer = batches.save_batch(
            BatchEntity(
                name="tck-new",
                status=BatchStatus.SEALED,
                created_at=now_ms() + timedelta(seconds=1),
            )
        )
        ids = [b.id for b in batches.find_batches(limit=1000)]
        assert ids.index(newer.id) < ids.index(older.id)
        sealed = [b.id for b in batches.find_batches(statuses=frozenset({BatchStatus.SEALED}))]
        assert newer.id in sealed and older.id not in sealed
        assert batches.record_batch_error(older.id, "chunk 3 failed")
        found = batches.find_batch(older.id)
        assert found is not None and found.last_error == "chunk 3 failed"
        assert batches.record_batch_error(uuid7(), "x") is False


class WorkflowConditionStoreContract(StoreContract):
    """Conditions kept per parent, read back by position, deleted per parent."""

    capability = WorkflowConditionStore
    summary = "save, read by position, delete by parent"

    def test_conditions_by_parent_in_position_order(self, tck_fixture: StoreFixture) -> None:
        conds = self.cap(tck_fixture, WorkflowConditionStore)
        parent, other = uuid7(), uuid7()
        second = WorkflowConditionEntity(
            parent_job_id=parent,
            child_job_id=uuid7(),
            kind=ConditionKind.CUSTOM,
            expression='{"target": "m:pred"}',
            position=1,
        )
        first = WorkflowConditionEntity(
            parent_job_id=parent, child_job_id=uuid7(), kind=ConditionKind.ON_FAILURE, position=0
        )
        foreign = WorkflowConditionEntity(parent_job_id=other, child_job_id=uuid7())
        conds.save_conditions([second, first, foreign])
        found = conds.find_conditions_by_parent(parent)
        assert [c.id for c in found] == [first.id, second.id]
        assert found[1] == second
        assert found[0].kind is ConditionKind.ON_FAILURE

    def test_delete_conditions_by_parent(self, tck_fixture: StoreFixture) -> None:
        conds = self.cap(tck_fixture, WorkflowConditionStore)
        parent, other = uuid7(), uuid7()
        conds.save_conditions(
            [
                WorkflowConditionEntity(parent_job_id=parent, child_job_id=uuid7(), position=i)
                for i in range(3)
            ]
            + [WorkflowConditionEntity(parent_job_id=other, child_job_id=uuid7())]
        )
        assert conds.delete_conditions_by_parent(parent) == 3
        assert conds.find_conditions_by_parent(parent) == []
        assert len(conds.find_conditions_by_parent(other)) == 1
        assert conds.delete_conditions_by_parent(parent) == 0


class SignalStoreContract(StoreContract):
    """Signals delivered once by id or key; deadlines on the store clock; timeouts lose races."""

    capability = SignalStore
    summary = "delivery by id/key, delivery race, deadlines and expiry"

    def test_deliver_by_id_makes_the_job_due_with_payload(self, tck_fixture: StoreFixture) -> None:
        signals = self.cap(tck_fixture, SignalStore)
        store = tck_fixture.store()
        job = self.insert(
            tck_fixture,
            status=JobStatus.AWAITING_SIGNAL,
            signal_key="tck-k",
            scheduled_at=store.server_now() + timedelta(days=1),
        )
        assert signals.deliver_signal_by_id(job.id, '{"approved": true}') is True
        got = self.reload(store, job)
        assert (got.status, got.signal_payload) == (JobStatus.PENDING, '{"approved": true}')
        assert self.claim_one(store).id == job.id, "a delivered job is due now"
        assert signals.deliver_signal_by_id(job.id, "again") is False
        assert signals.deliver_signal_by_id(uuid7(), "x") is False

    def test_deliver_to_a_job_not_awaiting_is_refused(self, tck_fixture: StoreFixture) -> None:
        signals = self.cap(tck_fixture, SignalStore)
        job = self.insert(tck_fixture, signal_key="tck-k")
        assert signals.deliver_signal_by_id(job.id, "x") is False
        assert self.reload(tck_fixture.store(), job).signal_payload is None

    def test_deliver_by_key_reaches_every_waiting_job(self, tck_fixture: StoreFixture) -> None:
        signals = self.cap(tck_fixture, SignalStore)
        store = tck_fixture.store()
        waiting = [
            self.insert(tck_fixture, status=JobStatus.AWAITING_SIGNAL, signal_key="tck-order-7")
            for _ in range(2)
        ]
        other = self.insert(tck_fixture, status=JobStatus.AWAITING_SIGNAL, signal_key="tck-else")
        pending = self.insert(tck_fixture, signal_key="tck-order-7")
        assert signals.deliver_signal_by_key("tck-order-7", "paid") == 2
        for job in waiting:
            assert self.reload(store, job).signal_payload == "paid"
        assert self.reload(store, other).status is JobStatus.AWAITING_SIGNAL
        assert self.reload(store, pending).signal_payload is None
        assert signals.deliver_signal_by_key("tck-order-7", "twice") == 0

    def test_concurrent_deliveries_have_one_winner(self, tck_fixture: StoreFixture) -> None:
        signals = self.cap(tck_fixture, SignalStore)
        job = self.insert(tck_fixture, status=JobStatus.AWAITING_SIGNAL, signal_key="tck-race")
        results = race(8, lambda i: (i, signals.deliver_signal_by_id(job.id, f"payload-{i}")))
        winners = [i for i, won in results if won]
        assert len(winners) == 1, f"{len(winners)} deliveries won"
        assert self.reload(tck_fixture.store(), job).signal_payload == f"payload-{winners[0]}"

    def test_deadline_passes_on_the_store_clock_then_expires(
        self, tck_fixture: StoreFixture
    ) -> None:
        signals = self.cap(tck_fixture, SignalStore)
        store = tck_fixture.store()
        deadline = store.server_now() + timedelta(milliseconds=600)
        soon = self.insert(
            tck_fixture,
            status=JobStatus.AWAITING_SIGNAL,
            signal_key="tck-a",
            signal_deadline=deadline,
        )
        self.insert(
            tck_fixture,
            status=JobStatus.AWAITING_SIGNAL,
            signal_key="tck-b",
            signal_deadline=deadline + timedelta(hours=1),
        )
        self.insert(tck_fixture, status=JobStatus.AWAITING_SIGNAL, signal_key="tck-c")
        assert signals.find_timed_out_signal_jobs(10) == []
        late = wait_until(lambda: signals.find_timed_out_signal_jobs(10), 5, "the deadline")
        assert [j.id for j in late] == [soon.id]
        assert signals.expire_signal(soon.id, "signal timed out") is True
        expired = self.reload(store, soon)
        assert (expired.status, expired.last_error) == (JobStatus.FAILED, "signal timed out")
        assert expired.finished_at is not None
        assert signals.deliver_signal_by_id(soon.id, "too late") is False
        assert signals.find_timed_out_signal_jobs(10) == []

    def test_expiry_loses_to_a_delivered_signal(self, tck_fixture: StoreFixture) -> None:
        signals = self.cap(tck_fixture, SignalStore)
        store = tck_fixture.store()
        job = self.insert(
            tck_fixture,
            status=JobStatus.AWAITING_SIGNAL,
            signal_key="tck-k",
            signal_deadline=store.server_now() - timedelta(seconds=1),
        )
        assert signals.deliver_signal_by_id(job.id, "in time") is True
        assert signals.expire_signal(job.id, "timeout") is False
        assert self.reload(store, job).status is JobStatus.PENDING

    def test_delivery_and_expiry_race_has_one_winner(self, tck_fixture: StoreFixture) -> None:
        signals = self.cap(tck_fixture, SignalStore)
        store = tck_fixture.store()
        job = self.insert(
            tck_fixture,
            status=JobStatus.AWAITING_SIGNAL,
            signal_key="tck-k",
            signal_deadline=store.server_now() - timedelta(seconds=1),
        )
        results = race(
            8,
            lambda i: (
                signals.deliver_signal_by_id(job.id, "x")
                if i % 2
                else signals.expire_signal(job.id, "timeout")
            ),
        )
        assert results.count(True) == 1
        assert self.reload(store, job).status in (JobStatus.PENDING, JobStatus.FAILED)

    @spi(since=SPI_1_1)
    def test_expire_signal_to_cancelled_or_pending(self, tck_fixture: StoreFixture) -> None:
        signals = self.cap(tck_fixture, SignalStore)
        store = tck_fixture.store()
        past = store.server_now() - timedelta(seconds=1)
        dropped = self.insert(
            tck_fixture, status=JobStatus.AWAITING_SIGNAL, signal_key="tck-k", signal_deadline=past
        )
        resumed = self.insert(
            tck_fixture,
            status=JobStatus.AWAITING_SIGNAL,
            signal_key="tck-k",
            signal_deadline=past,
            scheduled_at=store.server_now() + timedelta(days=1),
        )
        assert signals.expire_signal(dropped.id, "no signal", JobStatus.CANCELLED) is True
        got = self.reload(store, dropped)
        assert (got.status, got.last_error) == (JobStatus.CANCELLED, "no signal")
        assert got.finished_at is not None
        assert signals.expire_signal(resumed.id, "ran without", JobStatus.PENDING) is True
        got = self.reload(store, resumed)
        assert (got.status, got.last_error, got.signal_payload) == (
            JobStatus.PENDING,
            "ran without",
            None,
        )
        assert self.claim_one(store).id == resumed.id, "expired to PENDING: due now"
        assert signals.expire_signal(resumed.id, "again", JobStatus.CANCELLED) is False
        with pytest.raises(StoreDataError):
            signals.expire_signal(dropped.id, "bad", JobStatus.SUCCEEDED)

    @spi(since=SPI_1_1)
    def test_find_jobs_by_signal_key(self, tck_fixture: StoreFixture) -> None:
        signals = self.cap(tck_fixture, SignalStore)
        base = tck_fixture.store().server_now()
        second = self.insert(tck_fixture, signal_key="tck-find", created_at=base)
        first = self.insert(
            tck_fixture,
            status=JobStatus.AWAITING_SIGNAL,
            signal_key="tck-find",
            created_at=base - timedelta(seconds=5),
        )
        self.insert(tck_fixture, signal_key="tck-other")
        found = signals.find_jobs_by_signal_key("tck-find", 10)
        assert [j.id for j in found] == [first.id, second.id]
        assert [j.id for j in signals.find_jobs_by_signal_key("tck-find", 1)] == [first.id]
        assert signals.find_jobs_by_signal_key("tck-none", 10) == []
