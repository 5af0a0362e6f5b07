# (capabilities are probed by passing their Protocol class: store.capability(LockStore))
"""Invariants that span several tables or collections (the dual hot/cold write paths)."""

from __future__ import annotations

from ratchet_api.ids import uuid7
from ratchet_api.model import VersionedState
from ratchet_api.store.entities import ExecutionRecord, JobEntity, JobLogLine
from ratchet_api.store.protocols import ArchiveStore, JobAuditStore, JobExtensionStore
from ratchet_tck.contracts.base import StoreContract
from ratchet_tck.contracts.base_race import race
from ratchet_tck.contracts.history import finished
from ratchet_tck.fixture import StoreFixture, now_ms


def _places(fixture: StoreFixture, archive: ArchiveStore, job: JobEntity) -> list[str]:
    places = []
    if fixture.store().find_by_id(job.id) is not None:
        places.append("hot")
    if archive.find_archived_job(job.id) is not None:
        places.append("archive")
    return places


class DualWriteInvariantContract(StoreContract):
    """A job is in exactly one of hot/archive with everything it owns; bulk inserts keep tags
    consistent; deleting a job deletes every row it owns. Required; the archive and extension
    parts are N/A for a store without those capabilities."""

    summary = "hot xor archive, owned data survives archiving, bulk tags, delete cascades"

    def test_job_is_in_exactly_one_place_around_archiving(self, tck_fixture: StoreFixture) -> None:
        archive = self.need(tck_fixture, ArchiveStore)
        done = finished(self, tck_fixture)
        pending = self.insert(tck_fixture)
        assert _places(tck_fixture, archive, pending) == ["hot"]
        assert _places(tck_fixture, archive, done) == ["hot"]
        assert archive.archive_job(done.id)
        assert _places(tck_fixture, archive, done) == ["archive"]
        assert archive.archive_job(pending.id) is False
        assert _places(tck_fixture, archive, pending) == ["hot"]

    def test_concurrent_archiving_moves_a_job_once(self, tck_fixture: StoreFixture) -> None:
        archive = self.need(tck_fixture, ArchiveStore)
        done = finished(self, tck_fixture)
        results = race(6, lambda _: archive.archive_job(done.id))
        assert results.count(True) == 1
        assert _places(tck_fixture, archive, done) == ["archive"]
        assert len([j for j in archive.find_archived_jobs(10) if j.id == done.id]) == 1

    def test_archive_by_age_never_duplicates_or_loses(self, tck_fixture: StoreFixture) -> None:
        archive = self.need(tck_fixture, ArchiveStore)
        jobs = [finished(self, tck_fixture) for _ in range(6)]
        cutoff = tck_fixture.store().server_now()
        moved = race(3, lambda _: archive.archive_finished_before(cutoff, 10))
        assert sum(moved) == 6, f"archived {sum(moved)} times for 6 jobs"
        for job in jobs:
            assert _places(tck_fixture, archive, job) == ["archive"]

    def test_tags_properties_and_state_survive_archiving(self, tck_fixture: StoreFixture) -> None:
        archive = self.need(tck_fixture, ArchiveStore)
        ext = self.need(tck_fixture, JobExtensionStore)
        store = tck_fixture.store()
        self.insert(tck_fixture, tags=("tck-keep-1", "tck-keep-2"))
        job = self.claim_one(store)
        assert ext.put_property(job.id, "tenant.id", "acme")
        assert ext.init_state(job.id, "progress", '{"n": 3}')
        assert store.mark_succeeded(job.id, job.claim_seq, None)
        assert archive.archive_job(job.id)
        moved = archive.find_archived_job(job.id)
        assert moved is not None and sorted(moved.tags) == ["tck-keep-1", "tck-keep-2"]
        assert ext.get_property(job.id, "tenant.id") == "acme"
        assert ext.get_properties_by_prefix(job.id, "tenant.") == {"tenant.id": "acme"}
        assert ext.get_state(job.id, "progress") == VersionedState(json='{"n": 3}', version=0)

    def test_bulk_insert_keeps_tags_consistent(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        jobs = [tck_fixture.new_pending_job(tags=(f"tck-b{i % 3}", "tck-all")) for i in range(9)]
        dup = tck_fixture.new_pending_job(idempotency_key="tck-dw-key", tags=("tck-dup",))
        store.insert_job(dup)
        skipped = tck_fixture.new_pending_job(idempotency_key="tck-dw-key", tags=("tck-orphan",))
        assert store.bulk_insert([*jobs, skipped]) == 9
        for job in jobs:
            assert store.find_tags(job.id) == sorted(job.tags)
            assert sorted(self.reload(store, job).tags) == sorted(job.tags)
        assert store.find_tags(skipped.id) == [], "a skipped job must not leave tags behind"
        assert store.find_tags(dup.id) == ["tck-dup"]

    def test_delete_removes_every_owned_row(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = self.insert(tck_fixture, tags=("tck-gone",))
        ext = store.capability(JobExtensionStore)
        audit = store.capability(JobAuditStore)
        if ext is not None:
            ext.put_property(job.id, "k", "v")
            ext.init_state(job.id, "ns", "{}")
        if audit is not None:
            audit.save_execution(
                ExecutionRecord(
                    job_id=job.id, attempt=1, node_id="n", status=job.status, started_at=now_ms()
                )
            )
            audit.append_logs([JobLogLine(job_id=job.id, message="hello")])
        assert store.delete_job(job.id)
        assert store.find_tags(job.id) == []
        if ext is not None:
            assert ext.get_property(job.id, "k") is None
            assert ext.get_state(job.id, "ns") is None
        if audit is not None:
            assert audit.find_executions_by_job_id(job.id) == []
            assert audit.find_logs_by_job_id(job.id) == []
        # a new job reusing the id starts clean: nothing of the deleted one leaks into it
        reborn = store.insert_job(tck_fixture.new_pending_job(id=job.id, tags=("tck-new",)))
        assert store.find_tags(reborn.id) == ["tck-new"]
        if ext is not None:
            assert ext.get_properties_by_prefix(reborn.id, "") == {}
        assert store.find_by_id(uuid7()) is None
