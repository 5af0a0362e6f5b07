"""SealedValueStore and SealedArchiveStore contracts: paged scans of stored values (live or
archived jobs) and compare-and-set rewrites."""

from __future__ import annotations

from uuid import UUID

import attrs

from ratchet_api.ids import uuid7
from ratchet_api.model import StateWriteResult
from ratchet_api.store.entities import (
    ConditionKind,
    JobEntity,
    StoredValue,
    WorkflowConditionEntity,
)
from ratchet_api.store.protocols import (
    ArchiveStore,
    JobExtensionStore,
    SealedArchiveStore,
    SealedValueStore,
    WorkflowConditionStore,
)
from ratchet_api.store.versions import SPI_1_1
from ratchet_tck.contracts.base import StoreContract, assert_same_instant, raises_store_data_error
from ratchet_tck.contracts.history import finished
from ratchet_tck.fixture import StoreFixture


class SealedValueStoreContract(StoreContract):
    """Scans return payload/result/last_error and state per job in id order without splitting a
    job across pages; rewrites apply only while the stored text is unchanged."""

    capability = SealedValueStore
    spi_since = SPI_1_1  # a capability new in store SPI 1.1
    summary = "paged value scans in id order, compare-and-set rewrites of job columns and state"

    def _scan_all(
        self, sealed: SealedValueStore, after: UUID, limit: int
    ) -> list[list[StoredValue]]:
        pages: list[list[StoredValue]] = []
        while True:
            page = sealed.scan_values(after, limit)
            if not page:
                return pages
            pages.append(page)
            after = page[-1].job_id

    def test_scan_pages_in_id_order_and_never_split_a_job(self, tck_fixture: StoreFixture) -> None:
        sealed = self.cap(tck_fixture, SealedValueStore)
        sentinel = self.insert(tck_fixture)
        jobs = [self.insert(tck_fixture, payload=f'{{"n":{i}}}') for i in range(5)]
        tck_fixture.store().update_job(attrs.evolve(jobs[1], result='"done"', last_error="E"))
        pages = self._scan_all(sealed, sentinel.id, 2)
        seen = [v for page in pages for v in page]
        assert sentinel.id not in {v.job_id for v in seen}
        mine = [v for v in seen if v.job_id in {j.id for j in jobs}]
        assert [v.job_id for v in mine if v.column == "payload"] == [j.id for j in jobs]
        assert {v.text for v in mine if v.column == "payload"} == {f'{{"n":{i}}}' for i in range(5)}
        extra = {(v.column, v.text) for v in mine if v.job_id == jobs[1].id}
        assert {("result", '"done"'), ("last_error", "E")} <= extra
        for page in pages:
            assert len({v.job_id for v in page}) <= 2
        ids = [page[-1].job_id for page in pages]
        assert ids == sorted(ids)

    def test_scan_includes_state_namespaces(self, tck_fixture: StoreFixture) -> None:
        sealed = self.cap(tck_fixture, SealedValueStore)
        ext = self.need(tck_fixture, JobExtensionStore)
        sentinel = self.insert(tck_fixture)
        job = self.insert(tck_fixture)
        assert ext.init_state(job.id, "b", '{"x":2}') is StateWriteResult.UPDATED
        assert ext.init_state(job.id, "a", '{"x":1}') is StateWriteResult.UPDATED
        values = [v for v in sealed.scan_values(sentinel.id, 10) if v.job_id == job.id]
        states = [(v.namespace, v.text) for v in values if v.column == "state"]
        assert sorted(states) == [("a", '{"x":1}'), ("b", '{"x":2}')]

    def test_replace_value_is_compare_and_set(self, tck_fixture: StoreFixture) -> None:
        sealed = self.cap(tck_fixture, SealedValueStore)
        job = self.insert(tck_fixture, payload='{"old":1}')
        current = StoredValue(job_id=job.id, column="payload", text='{"old":1}')
        assert sealed.replace_values([(current, '{"new":1}')]) == 1
        reloaded = self.reload(tck_fixture.store(), job)
        assert reloaded.payload == '{"new":1}'
        assert reloaded.status is job.status and reloaded.attempt == job.attempt
        assert sealed.replace_values([(current, '{"newer":1}')]) == 0
        assert self.reload(tck_fixture.store(), job).payload == '{"new":1}'
        gone = StoredValue(job_id=job.id, column="result", text="x")
        assert sealed.replace_values([(gone, "y")]) == 0
        assert sealed.replace_values([]) == 0

    def test_replace_state_keeps_its_version(self, tck_fixture: StoreFixture) -> None:
        sealed = self.cap(tck_fixture, SealedValueStore)
        ext = self.need(tck_fixture, JobExtensionStore)
        job = self.insert(tck_fixture)
        ext.init_state(job.id, "ns", "one")
        assert ext.update_state(job.id, "ns", "two", 0) is StateWriteResult.UPDATED
        value = StoredValue(job_id=job.id, column="state", namespace="ns", text="two")
        assert sealed.replace_values([(value, "TWO")]) == 1
        state = ext.get_state(job.id, "ns")
        assert state is not None and (state.json, state.version) == ("TWO", 1)
        assert sealed.replace_values([(value, "again")]) == 0

    def test_one_call_rewrites_many_values_and_skips_changed_ones(
        self, tck_fixture: StoreFixture
    ) -> None:
        sealed = self.cap(tck_fixture, SealedValueStore)
        jobs = [self.insert(tck_fixture, payload=f"p{i}") for i in range(4)]
        changes = [
            (StoredValue(job_id=j.id, column="payload", text=f"p{i}"), f"q{i}")
            for i, j in enumerate(jobs)
        ]
        stale = (StoredValue(job_id=jobs[0].id, column="payload", text="not-current"), "z")
        assert sealed.replace_values([*changes, stale]) == 4
        store = tck_fixture.store()
        assert [self.reload(store, j).payload for j in jobs] == ["q0", "q1", "q2", "q3"]

    def test_unknown_column_is_refused(self, tck_fixture: StoreFixture) -> None:
        sealed = self.cap(tck_fixture, SealedValueStore)
        job = self.insert(tck_fixture)
        with raises_store_data_error("column"):
            sealed.replace_values([(StoredValue(job_id=job.id, column="target", text="x"), "y")])


class SealedArchiveStoreContract(StoreContract):
    """``SealedValueStore``'s contract over archived jobs: scans return the values of archived
    jobs only, in id order without splitting a job; rewrites apply only while the stored text
    is unchanged and never touch a live job."""

    capability = SealedArchiveStore
    spi_since = SPI_1_1  # a capability new in store SPI 1.1 (third wave)
    summary = "paged scans of archived jobs' values, compare-and-set rewrites, live jobs untouched"

    def _archived(self, fixture: StoreFixture, ok: bool = True, **kw: object) -> JobEntity:
        """A finished job (succeeded with ``"done"`` or failed with ``"boom"``), archived."""
        job = finished(self, fixture, ok, **kw)
        assert self.need(fixture, ArchiveStore).archive_job(job.id)
        return job

    def _scan_all(
        self, sealed: SealedArchiveStore, after: UUID | None, limit: int
    ) -> list[list[StoredValue]]:
        pages: list[list[StoredValue]] = []
        while True:
            page = sealed.scan_archived_values(after, limit)
            if not page:
                return pages
            pages.append(page)
            after = page[-1].job_id

    def test_scan_pages_archived_jobs_in_id_order_and_never_splits_one(
        self, tck_fixture: StoreFixture
    ) -> None:
        sealed = self.cap(tck_fixture, SealedArchiveStore)
        jobs = [self._archived(tck_fixture, payload=f'{{"n":{i}}}') for i in range(5)]
        live = self.insert(tck_fixture, payload='{"live":1}')
        pages = self._scan_all(sealed, None, 2)
        seen = [v for page in pages for v in page]
        assert live.id not in {v.job_id for v in seen}
        mine = [v for v in seen if v.job_id in {j.id for j in jobs}]
        assert [v.job_id for v in mine if v.column == "payload"] == sorted(j.id for j in jobs)
        assert {v.text for v in mine if v.column == "payload"} == {f'{{"n":{i}}}' for i in range(5)}
        assert {v.text for v in mine if v.column == "result"} == {'"done"'}
        for page in pages:
            assert len({v.job_id for v in page}) <= 2
        ids = [page[-1].job_id for page in pages]
        assert ids == sorted(ids)
        first = min(j.id for j in jobs)
        assert first not in {v.job_id for v in sealed.scan_archived_values(first, 10)}
        with raises_store_data_error("limit"):
            sealed.scan_archived_values(None, 0)
        # and the live scan leaves archived jobs out
        live_scan = self.need(tck_fixture, SealedValueStore).scan_values(None, 100)
        assert not {v.job_id for v in live_scan} & {j.id for j in jobs}

    def test_replace_is_compare_and_set_on_archived_jobs_only(
        self, tck_fixture: StoreFixture
    ) -> None:
        sealed = self.cap(tck_fixture, SealedArchiveStore)
        archive = self.need(tck_fixture, ArchiveStore)
        job = self._archived(tck_fixture, payload="old", ok=False)
        current = StoredValue(job_id=job.id, column="payload", text="old")
        error = StoredValue(job_id=job.id, column="last_error", text="boom")
        assert sealed.replace_archived_values([(current, "new"), (error, "BOOM")]) == 2
        moved = archive.find_archived_job(job.id)
        assert moved is not None
        assert (moved.payload, moved.last_error, moved.status) == ("new", "BOOM", job.status)
        assert_same_instant(moved.finished_at, job.finished_at, "finished_at")
        assert sealed.replace_archived_values([(current, "newer")]) == 0
        gone = StoredValue(job_id=job.id, column="result", text="x")
        assert sealed.replace_archived_values([(gone, "y")]) == 0
        assert sealed.replace_archived_values([]) == 0
        live = self.insert(tck_fixture, payload="live")
        as_live = StoredValue(job_id=live.id, column="payload", text="live")
        assert sealed.replace_archived_values([(as_live, "changed")]) == 0
        assert self.reload(tck_fixture.store(), live).payload == "live"
        missing = StoredValue(job_id=uuid7(), column="payload", text="old")
        assert sealed.replace_archived_values([(missing, "x")]) == 0

    def test_archived_state_is_scanned_and_replaced_keeping_its_version(
        self, tck_fixture: StoreFixture
    ) -> None:
        sealed = self.cap(tck_fixture, SealedArchiveStore)
        ext = self.need(tck_fixture, JobExtensionStore)
        store = tck_fixture.store()
        job = self.insert(tck_fixture)
        assert ext.init_state(job.id, "b", "two") is StateWriteResult.UPDATED
        assert ext.update_state(job.id, "b", "TWO", 0) is StateWriteResult.UPDATED
        assert ext.init_state(job.id, "a", "one") is StateWriteResult.UPDATED
        claimed = self.claim_one(store)
        assert store.mark_succeeded(job.id, claimed.claim_seq, '"done"')
        assert self.need(tck_fixture, ArchiveStore).archive_job(job.id)
        values = [v for v in sealed.scan_archived_values(None, 10) if v.job_id == job.id]
        states = [(v.namespace, v.text) for v in values if v.column == "state"]
        assert states == [("a", "one"), ("b", "TWO")]
        a = StoredValue(job_id=job.id, column="state", namespace="a", text="one")
        b = StoredValue(job_id=job.id, column="state", namespace="b", text="TWO")
        stale = StoredValue(job_id=job.id, column="state", namespace="b", text="two")
        assert sealed.replace_archived_values([(a, "ONE"), (stale, "x")]) == 1
        assert sealed.replace_archived_values([(b, "2")]) == 1
        read = {ns: ext.get_state(job.id, ns) for ns in ("a", "b")}
        assert {ns: (s.json, s.version) for ns, s in read.items() if s is not None} == {
            "a": ("ONE", 0),
            "b": ("2", 1),
        }
        assert sealed.replace_archived_values([(b, "again")]) == 0

    def test_the_condition_of_an_archived_child_is_scanned_and_replaced(
        self, tck_fixture: StoreFixture
    ) -> None:
        sealed = self.cap(tck_fixture, SealedArchiveStore)
        conditions = self.need(tck_fixture, WorkflowConditionStore)
        child = self._archived(tck_fixture)
        live = self.insert(tck_fixture)
        parent = uuid7()
        conditions.save_conditions(
            [
                WorkflowConditionEntity(
                    parent_job_id=parent,
                    child_job_id=child.id,
                    kind=ConditionKind.CUSTOM,
                    expression="archived-cond",
                ),
                WorkflowConditionEntity(
                    parent_job_id=parent,
                    child_job_id=live.id,
                    kind=ConditionKind.CUSTOM,
                    expression="live-cond",
                    position=1,
                ),
            ]
        )
        scanned = sealed.scan_archived_values(None, 10)
        assert ("condition", "archived-cond") in {
            (v.column, v.text) for v in scanned if v.job_id == child.id
        }
        assert live.id not in {v.job_id for v in scanned}
        mine = StoredValue(job_id=child.id, column="condition", text="archived-cond")
        theirs = StoredValue(job_id=live.id, column="condition", text="live-cond")
        assert sealed.replace_archived_values([(mine, "ARCHIVED"), (theirs, "LIVE")]) == 1
        found = {c.child_job_id: c.expression for c in conditions.find_conditions_by_parent(parent)}
        assert found == {child.id: "ARCHIVED", live.id: "live-cond"}
        assert sealed.replace_archived_values([(mine, "again")]) == 0

    def test_unknown_column_is_refused(self, tck_fixture: StoreFixture) -> None:
        sealed = self.cap(tck_fixture, SealedArchiveStore)
        job = self._archived(tck_fixture)
        with raises_store_data_error("column"):
            sealed.replace_archived_values(
                [(StoredValue(job_id=job.id, column="target", text="x"), "y")]
            )
