"""Contracts of the status transitions: terminal, retry, pause/resume, batch status/orphans."""

from __future__ import annotations

from datetime import timedelta

from ratchet_api.ids import uuid7
from ratchet_api.model import JobStatus
from ratchet_api.store.entities import ChildSettlement, Completion, JobEntity
from ratchet_api.store.versions import SPI_1_1
from ratchet_tck.contracts.base import (
    StoreContract,
    assert_same_instant,
    naive,
    raises_store_data_error,
)
from ratchet_tck.contracts.base_race import race
from ratchet_tck.fixture import StoreFixture
from ratchet_tck.versions import spi


def _running(contract: StoreContract, fixture: StoreFixture, node: str = "tck-node") -> JobEntity:
    contract.insert(fixture)
    return contract.claim_one(fixture.store(), node)


class JobTerminalStoreContract(StoreContract):
    """Fenced success and dead-letter writes; cancellation of non-terminal jobs only."""

    summary = "fenced success/failure, batched success, cancellation"

    def test_mark_succeeded_stores_result_and_clears_owner(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = _running(self, tck_fixture)
        assert store.mark_succeeded(job.id, job.claim_seq, '{"total": 3}') is True
        done = self.reload(store, job)
        assert done.status is JobStatus.SUCCEEDED
        assert done.result == '{"total": 3}'
        assert done.owner is None
        assert done.finished_at is not None and job.started_at is not None
        assert done.finished_at >= job.started_at - timedelta(milliseconds=1)

    def test_stale_claim_seq_cannot_complete(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = _running(self, tck_fixture)
        assert store.mark_succeeded(job.id, job.claim_seq - 1, "stale") is False
        assert store.mark_succeeded(job.id, job.claim_seq + 1, "future") is False
        assert store.mark_failed_terminal(job.id, job.claim_seq + 1, "stale") is False
        still = self.reload(store, job)
        assert (still.status, still.result, still.last_error) == (JobStatus.RUNNING, None, None)

    def test_completion_after_release_and_reclaim_is_stale(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        first = _running(self, tck_fixture, "tck-node-old")
        assert store.reset_running_jobs("tck-node-old") == 1
        second = self.claim_one(store, "tck-node-new")
        assert store.mark_succeeded(first.id, first.claim_seq, "old owner") is False
        assert store.mark_failed_terminal(first.id, first.claim_seq, "old owner") is False
        assert self.reload(store, first).owner == "tck-node-new"
        assert store.mark_succeeded(second.id, second.claim_seq, "new owner") is True
        assert self.reload(store, first).result == "new owner"

    def test_completion_of_pending_or_missing_job_is_refused(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        pending = self.insert(tck_fixture)
        assert store.mark_succeeded(pending.id, 0, "x") is False
        assert store.mark_succeeded(uuid7(), 1, "x") is False
        assert store.mark_failed_terminal(uuid7(), 1, "x") is False
        assert self.reload(store, pending).status is JobStatus.PENDING

    def test_succeeded_job_cannot_be_completed_twice(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = _running(self, tck_fixture)
        assert store.mark_succeeded(job.id, job.claim_seq, "first")
        assert store.mark_succeeded(job.id, job.claim_seq, "second") is False
        assert store.mark_failed_terminal(job.id, job.claim_seq, "late") is False
        done = self.reload(store, job)
        assert (done.status, done.result) == (JobStatus.SUCCEEDED, "first")

    def test_mark_succeeded_many_applies_only_current_claims(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        for _ in range(3):
            self.insert(tck_fixture)
        a, b, c = store.claim_next_batch("tck-node", 3)
        applied = store.mark_succeeded_many(
            [
                Completion(job_id=a.id, claim_seq=a.claim_seq, result="a"),
                Completion(job_id=b.id, claim_seq=b.claim_seq + 5, result="stale"),
                Completion(job_id=c.id, claim_seq=c.claim_seq, result=None),
                Completion(job_id=uuid7(), claim_seq=1, result="missing"),
            ]
        )
        assert applied == {a.id, c.id}
        assert self.reload(store, a).result == "a"
        assert self.reload(store, b).status is JobStatus.RUNNING
        assert self.reload(store, c).status is JobStatus.SUCCEEDED
        assert store.mark_succeeded_many([]) == set()

    def test_mark_failed_terminal_dead_letters_with_error(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = _running(self, tck_fixture)
        assert store.mark_failed_terminal(job.id, job.claim_seq, "ValueError: bad") is True
        dead = self.reload(store, job)
        assert dead.status is JobStatus.FAILED
        assert dead.last_error == "ValueError: bad"
        assert dead.finished_at is not None
        assert dead.owner is None

    def test_cancel_non_terminal_jobs(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        jobs = [
            self.insert(tck_fixture),
            self.insert(tck_fixture, status=JobStatus.WAITING),
            self.insert(tck_fixture, status=JobStatus.AWAITING_SIGNAL),
            self.insert(tck_fixture, status=JobStatus.PAUSED),
        ]
        for job in jobs:
            assert store.cancel_job(job.id) is True, f"cancel from {job.status}"
            cancelled = self.reload(store, job)
            assert cancelled.status is JobStatus.CANCELLED
            assert cancelled.finished_at is not None

    def test_cancel_supersedes_a_running_claim(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = _running(self, tck_fixture)
        assert store.cancel_job(job.id) is True
        assert store.mark_succeeded(job.id, job.claim_seq, "too late") is False
        assert self.reload(store, job).status is JobStatus.CANCELLED

    def test_cancel_of_terminal_or_missing_job_is_refused(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = _running(self, tck_fixture)
        assert store.mark_succeeded(job.id, job.claim_seq, "done")
        assert store.cancel_job(job.id) is False
        assert self.reload(store, job).status is JobStatus.SUCCEEDED
        failed = _running(self, tck_fixture)
        assert store.mark_failed_terminal(failed.id, failed.claim_seq, "x")
        assert store.cancel_job(failed.id) is False
        assert self.reload(store, failed).status is JobStatus.FAILED
        assert store.cancel_job(uuid7()) is False


class JobRetryStoreContract(StoreContract):
    """Fenced retry scheduling and the operator's dead-letter retry."""

    summary = "fenced retry scheduling, dead-letter retry, bad input"

    def test_schedule_retry_returns_job_to_pending_at_run_at(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        job = _running(self, tck_fixture)
        run_at = store.server_now() + timedelta(minutes=10)
        assert store.schedule_retry(job.id, job.claim_seq, run_at, "IOError: down") is True
        retried = self.reload(store, job)
        assert retried.status is JobStatus.PENDING
        assert retried.owner is None
        assert retried.last_error == "IOError: down"
        assert retried.attempt == 1, "the failed attempt stays counted"
        assert_same_instant(retried.scheduled_at, run_at, "scheduled_at")
        assert store.claim_next_batch("tck-node", 5) == [], "a retry is not due before run_at"

    def test_stale_retry_changes_nothing(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = _running(self, tck_fixture)
        assert store.schedule_retry(job.id, job.claim_seq + 1, store.server_now(), "x") is False
        assert store.schedule_retry(uuid7(), 1, store.server_now(), "x") is False
        still = self.reload(store, job)
        assert (still.status, still.owner) == (JobStatus.RUNNING, "tck-node")

    def test_retry_due_now_is_claimable_again(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = _running(self, tck_fixture)
        assert store.schedule_retry(job.id, job.claim_seq, store.server_now(), "again")
        again = self.claim_one(store)
        assert (again.id, again.attempt, again.claim_seq) == (job.id, 2, 2)

    def test_schedule_retry_refuses_naive_run_at(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = _running(self, tck_fixture)
        with raises_store_data_error("run_at", "scheduled_at"):
            store.schedule_retry(job.id, job.claim_seq, naive(store.server_now()), "x")
        assert self.reload(store, job).status is JobStatus.RUNNING

    def test_retry_dead_letter_resets_attempt(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = _running(self, tck_fixture)
        assert store.mark_failed_terminal(job.id, job.claim_seq, "dead")
        assert store.retry_dead_letter(job.id) is True
        revived = self.reload(store, job)
        assert revived.status is JobStatus.PENDING
        assert revived.attempt == 0
        assert revived.finished_at is None
        again = self.claim_one(store)
        assert again.id == job.id
        assert again.claim_seq == job.claim_seq + 1, "claim_seq never goes back"

    def test_retry_dead_letter_at_a_later_time(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = _running(self, tck_fixture)
        assert store.mark_failed_terminal(job.id, job.claim_seq, "dead")
        later = store.server_now() + timedelta(hours=1)
        assert store.retry_dead_letter(job.id, later) is True
        assert_same_instant(self.reload(store, job).scheduled_at, later, "scheduled_at")
        assert store.claim_next_batch("tck-node", 1) == []

    def test_retry_dead_letter_only_from_failed(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        running = _running(self, tck_fixture)
        pending = self.insert(tck_fixture)
        assert store.retry_dead_letter(pending.id) is False
        assert store.retry_dead_letter(running.id) is False
        assert store.retry_dead_letter(uuid7()) is False
        assert self.reload(store, running).status is JobStatus.RUNNING


class JobPauseStoreContract(StoreContract):
    """PENDING <-> PAUSED; paused jobs are never claimed; one resume wins a race."""

    summary = "pause/resume transitions, paused jobs unclaimable, resume race"

    def test_pause_holds_a_pending_job(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = self.insert(tck_fixture)
        assert store.pause_job(job.id) is True
        assert self.reload(store, job).status is JobStatus.PAUSED
        assert store.claim_next_batch("tck-node", 10) == []
        assert store.resume_job(job.id) is True
        assert self.reload(store, job).status is JobStatus.PENDING
        assert self.claim_one(store).id == job.id

    def test_pause_only_from_pending(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        running = _running(self, tck_fixture)
        waiting = self.insert(tck_fixture, status=JobStatus.WAITING)
        paused = self.insert(tck_fixture)
        assert store.pause_job(paused.id)
        assert store.pause_job(running.id) is False
        assert store.pause_job(waiting.id) is False
        assert store.pause_job(paused.id) is False
        assert store.pause_job(uuid7()) is False
        assert self.reload(store, running).status is JobStatus.RUNNING

    def test_resume_only_from_paused(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        running = _running(self, tck_fixture)
        pending = self.insert(tck_fixture)
        assert store.resume_job(pending.id) is False
        assert store.resume_job(running.id) is False
        assert store.resume_job(uuid7()) is False
        assert self.reload(store, running).status is JobStatus.RUNNING

    def test_concurrent_resumes_have_one_winner(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = self.insert(tck_fixture)
        assert store.pause_job(job.id)
        results = race(8, lambda _: store.resume_job(job.id))
        assert results.count(True) == 1, f"{results.count(True)} resumes won"
        assert self.reload(store, job).status is JobStatus.PENDING


class JobBatchStatusStoreContract(StoreContract):
    """Status CAS, claim release, node reset, children and orphan detection."""

    summary = "status CAS, release, node reset, children, orphans"

    def test_compare_and_swap_status(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = self.insert(tck_fixture, status=JobStatus.WAITING)
        assert store.compare_and_swap_status(job.id, JobStatus.PENDING, JobStatus.PAUSED) is False
        assert self.reload(store, job).status is JobStatus.WAITING
        assert store.compare_and_swap_status(job.id, JobStatus.WAITING, JobStatus.PENDING)
        assert self.reload(store, job).status is JobStatus.PENDING
        assert store.compare_and_swap_status(uuid7(), JobStatus.PENDING, JobStatus.PAUSED) is False

    def test_concurrent_status_swaps_have_one_winner(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = self.insert(tck_fixture, status=JobStatus.WAITING)
        results = race(
            8, lambda _: store.compare_and_swap_status(job.id, JobStatus.WAITING, JobStatus.PENDING)
        )
        assert results.count(True) == 1

    def test_release_claim_does_not_count_the_attempt(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = _running(self, tck_fixture)
        assert store.release_claim(job.id, job.claim_seq + 1) is False
        assert store.release_claim(job.id, job.claim_seq) is True
        released = self.reload(store, job)
        assert (released.status, released.attempt, released.owner) == (
            JobStatus.PENDING,
            0,
            None,
        )
        again = self.claim_one(store)
        assert (again.attempt, again.claim_seq) == (1, 2)
        assert store.release_claim(job.id, job.claim_seq) is False, "old claim is stale"

    @spi(since=SPI_1_1)
    def test_release_claim_with_run_at_reschedules_without_counting(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        job = _running(self, tck_fixture)
        later = store.server_now() + timedelta(hours=1)
        assert store.release_claim(job.id, job.claim_seq + 1, run_at=later) is False
        assert store.release_claim(job.id, job.claim_seq, run_at=later) is True
        released = self.reload(store, job)
        assert (released.status, released.attempt, released.owner) == (
            JobStatus.PENDING,
            0,
            None,
        )
        assert_same_instant(released.scheduled_at, later, "scheduled_at")
        assert job.id not in {j.id for j in store.claim_next_batch("tck-node", 100)}
        again = _running(self, tck_fixture)
        with raises_store_data_error("run_at", "scheduled_at"):
            store.release_claim(again.id, again.claim_seq, run_at=naive(later))

    @spi(since=SPI_1_1)
    def test_release_unless_dispatched_keeps_a_started_claim(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        started = _running(self, tck_fixture)
        assert store.mark_dispatched({started.id: started.claim_seq}) == {started.id}
        assert store.release_claim(started.id, started.claim_seq, unless_dispatched=True) is False
        kept = self.reload(store, started)
        assert (kept.status, kept.owner, kept.attempt) == (JobStatus.RUNNING, "tck-node", 1)
        idle = _running(self, tck_fixture)
        assert store.release_claim(idle.id, idle.claim_seq, unless_dispatched=True) is True
        released = self.reload(store, idle)
        assert (released.status, released.attempt, released.dispatched_at) == (
            JobStatus.PENDING,
            0,
            None,
        )

    def test_reset_running_jobs_of_a_node(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        mine = [_running(self, tck_fixture, "tck-node-a") for _ in range(2)]
        other = _running(self, tck_fixture, "tck-node-b")
        assert store.reset_running_jobs("tck-node-a") == 2
        for job in mine:
            reset = self.reload(store, job)
            assert (reset.status, reset.owner, reset.attempt) == (JobStatus.PENDING, None, 1)
        assert self.reload(store, other).status is JobStatus.RUNNING
        assert store.reset_running_jobs("tck-node-a") == 0

    def test_find_children_oldest_first(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        parent = store.insert_job(tck_fixture.new_batch_parent_job())
        base = store.server_now()
        younger = self.insert(tck_fixture, parent_id=parent.id, created_at=base)
        older = self.insert(
            tck_fixture, parent_id=parent.id, created_at=base - timedelta(seconds=5)
        )
        self.insert(tck_fixture)
        assert [j.id for j in store.find_children(parent.id)] == [older.id, younger.id]
        assert store.find_children(uuid7()) == []

    def test_release_waiting_children_only_listed_waiting_ones(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        parent = store.insert_job(tck_fixture.new_batch_parent_job())
        later = store.server_now() + timedelta(hours=1)
        a = self.insert(
            tck_fixture, parent_id=parent.id, status=JobStatus.WAITING, scheduled_at=later
        )
        b = self.insert(tck_fixture, parent_id=parent.id, status=JobStatus.WAITING)
        c = self.insert(tck_fixture, parent_id=parent.id, status=JobStatus.PAUSED)
        stranger = self.insert(tck_fixture, status=JobStatus.WAITING)
        assert store.release_waiting_children(parent.id, [a.id, c.id, stranger.id]) == 1
        assert self.reload(store, a).status is JobStatus.PENDING
        assert self.reload(store, a).scheduled_at <= store.server_now(), "released: due now"
        assert self.reload(store, b).status is JobStatus.WAITING
        assert self.reload(store, c).status is JobStatus.PAUSED
        assert self.reload(store, stranger).status is JobStatus.WAITING

    def test_find_orphaned_children(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        dead_parent = _running(self, tck_fixture)
        live_parent = self.insert(tck_fixture)
        assert store.mark_succeeded(dead_parent.id, dead_parent.claim_seq, None)
        kept = self.insert(tck_fixture, parent_id=live_parent.id, status=JobStatus.WAITING)
        orphan = self.insert(tck_fixture, parent_id=dead_parent.id, status=JobStatus.WAITING)
        lost = self.insert(tck_fixture, parent_id=uuid7(), status=JobStatus.WAITING)
        self.insert(tck_fixture, parent_id=dead_parent.id)  # PENDING: not an orphan
        found = {j.id for j in store.find_orphaned_children(10)}
        assert found == {orphan.id, lost.id}
        assert kept.id not in found
        assert len(store.find_orphaned_children(1)) == 1

    @spi(since=SPI_1_1)
    def test_settle_children_moves_each_waiting_child_as_told(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        parent = store.insert_job(tck_fixture.new_batch_parent_job())
        later = store.server_now() + timedelta(hours=1)
        run = self.insert(
            tck_fixture, parent_id=parent.id, status=JobStatus.WAITING, scheduled_at=later
        )
        wait = self.insert(tck_fixture, parent_id=parent.id, status=JobStatus.WAITING)
        drop = self.insert(tck_fixture, parent_id=parent.id, status=JobStatus.WAITING)
        paused = self.insert(tck_fixture, parent_id=parent.id, status=JobStatus.PAUSED)
        stranger = self.insert(tck_fixture, status=JobStatus.WAITING)
        deadline = store.server_now() + timedelta(minutes=5)
        moved = store.settle_children(
            parent.id,
            [
                ChildSettlement(child_id=run.id, status=JobStatus.PENDING),
                ChildSettlement(
                    child_id=wait.id, status=JobStatus.AWAITING_SIGNAL, signal_deadline=deadline
                ),
                ChildSettlement(
                    child_id=drop.id, status=JobStatus.CANCELLED, reason="parent failed"
                ),
                ChildSettlement(child_id=paused.id, status=JobStatus.CANCELLED, reason="x"),
                ChildSettlement(child_id=stranger.id, status=JobStatus.PENDING),
            ],
        )
        assert moved == {run.id, wait.id, drop.id}
        released = self.reload(store, run)
        assert released.status is JobStatus.PENDING
        assert released.scheduled_at <= store.server_now(), "released: due now"
        waiting = self.reload(store, wait)
        assert waiting.status is JobStatus.AWAITING_SIGNAL
        assert_same_instant(waiting.signal_deadline, deadline, "signal_deadline")
        dropped = self.reload(store, drop)
        assert (dropped.status, dropped.last_error) == (JobStatus.CANCELLED, "parent failed")
        assert dropped.finished_at is not None
        assert self.reload(store, paused).status is JobStatus.PAUSED
        assert self.reload(store, stranger).status is JobStatus.WAITING
        again = store.settle_children(
            parent.id, [ChildSettlement(child_id=drop.id, status=JobStatus.PENDING)]
        )
        assert again == set(), "a settled child is never moved again"
        assert self.reload(store, drop).status is JobStatus.CANCELLED

    @spi(since=SPI_1_1)
    def test_racing_settlements_move_a_child_once(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        parent = store.insert_job(tck_fixture.new_batch_parent_job())
        child = self.insert(tck_fixture, parent_id=parent.id, status=JobStatus.WAITING)
        results = race(
            8,
            lambda i: store.settle_children(
                parent.id,
                [
                    ChildSettlement(
                        child_id=child.id,
                        status=JobStatus.PENDING if i % 2 else JobStatus.CANCELLED,
                        reason=f"caller {i}",
                    )
                ],
            ),
        )
        assert sum(len(r) for r in results) == 1, f"moved by {results}"
