"""SealedValueStore contract: paged scans of stored values and compare-and-set rewrites."""

from __future__ import annotations

from uuid import UUID

import attrs

from ratchet_api.model import StateWriteResult
from ratchet_api.store.entities import StoredValue
from ratchet_api.store.protocols import JobExtensionStore, SealedValueStore
from ratchet_api.store.versions import SPI_1_1
from ratchet_tck.contracts.base import StoreContract, raises_store_data_error
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
