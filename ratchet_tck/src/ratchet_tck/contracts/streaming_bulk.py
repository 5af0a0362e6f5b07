"""The bulk insert whose jobs arrive in parts (``StreamingBulkStore``): ``bulk_insert`` over
the concatenation of the parts, as one atomic unit, reading the parts once."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import timedelta

import pytest

from ratchet_api.errors import StoreDataError
from ratchet_api.model import JobStatus
from ratchet_api.store.entities import JobEntity
from ratchet_api.store.protocols import StreamingBulkStore
from ratchet_api.store.versions import SPI_1_1
from ratchet_tck.contracts.base import StoreContract, assert_same_instant, caller_transaction
from ratchet_tck.fixture import StoreFixture, StoreTransaction, now_ms


class _PartsFailedError(Exception):
    """Raised by the parts of a test while the store reads them."""


class _CountingParts:
    """An iterable of parts that counts how often it is iterated and how many parts it gave."""

    def __init__(self, parts: Sequence[Sequence[JobEntity]]) -> None:
        self._parts = parts
        self.iterations = 0
        self.given = 0

    def __iter__(self) -> Iterator[Sequence[JobEntity]]:
        self.iterations += 1
        for part in self._parts:
            self.given += 1
            yield part


def _transaction(fixture: StoreFixture) -> StoreTransaction:
    return caller_transaction(fixture, " (transactional enqueue is refused for it)")


class StreamingBulkStoreContract(StoreContract):
    """``bulk_insert_parts``: every job of every part stored with its fields and tags, the
    parts read once, idempotency keys skipped across parts, all or nothing (a bad job of a
    later part, or parts that raise, write nothing of any part, and the parts' exception
    propagates unchanged), and a joined view's parts undone by the caller's rollback."""

    capability = StreamingBulkStore
    spi_since = SPI_1_1  # a capability new in store SPI 1.1 (third wave)
    summary = (
        "bulk insert of jobs arriving in parts: read once, keys skipped across parts, "
        "all or nothing (a bad job or failing parts write nothing), joins the caller"
    )

    def test_every_job_of_every_part_is_stored_with_fields_and_tags(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        streaming = self.cap(tck_fixture, StreamingBulkStore)
        due = now_ms()
        jobs = [
            tck_fixture.new_pending_job(
                payload=f'{{"args": [{i}], "kwargs": {{}}}}',
                priority=10 * i - 30,
                max_retries=i,
                execution_target=f"tck-target-{i % 2}",
                scheduled_at=due + timedelta(minutes=i),
                tags=(f"tck-parts-{i}", "tck-parts"),
            )
            for i in range(7)
        ]

        def parts() -> Iterator[list[JobEntity]]:
            yield jobs[:3]
            yield []
            yield jobs[3:]

        assert streaming.bulk_insert_parts(parts()) == 7
        for job in jobs:
            found = self.reload(store, job)
            assert found.status is JobStatus.PENDING
            assert (found.target, found.payload, found.priority, found.max_retries) == (
                job.target,
                job.payload,
                job.priority,
                job.max_retries,
            )
            assert found.execution_target == job.execution_target
            assert found.idempotency_key is None
            assert_same_instant(found.scheduled_at, job.scheduled_at, "scheduled_at")
            assert sorted(found.tags) == sorted(job.tags)
            assert store.find_tags(job.id) == sorted(job.tags)
        assert streaming.bulk_insert_parts(iter(())) == 0
        assert streaming.bulk_insert_parts([[], []]) == 0

    def test_parts_are_read_once(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        streaming = self.cap(tck_fixture, StreamingBulkStore)
        chunks = [[tck_fixture.new_pending_job() for _ in range(n)] for n in (2, 1, 3)]
        parts = _CountingParts(chunks)
        assert streaming.bulk_insert_parts(parts) == 6
        assert parts.iterations == 1, "the store iterated the parts more than once"
        assert parts.given == 3, "every part is read"
        for chunk in chunks:
            for job in chunk:
                self.reload(store, job)

    def test_parts_that_raise_write_nothing_and_the_error_propagates(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        streaming = self.cap(tck_fixture, StreamingBulkStore)
        first = [tck_fixture.new_pending_job() for _ in range(3)]
        second = [tck_fixture.new_pending_job() for _ in range(2)]
        error = _PartsFailedError("tck: building the third part failed")

        def parts() -> Iterator[list[JobEntity]]:
            yield first
            yield second
            raise error

        with pytest.raises(_PartsFailedError) as caught:
            streaming.bulk_insert_parts(parts())
        assert caught.value is error, f"the parts' exception must propagate unchanged: {caught}"
        for job in (*first, *second):
            assert store.find_by_id(job.id) is None, "parts that raise must write nothing"
        # the store is usable afterwards (no half-finished write left behind)
        again = tck_fixture.new_pending_job()
        assert streaming.bulk_insert_parts([[again]]) == 1
        self.reload(store, again)

    def test_idempotency_keys_skipped_when_they_exist_or_repeat_across_parts(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        streaming = self.cap(tck_fixture, StreamingBulkStore)
        existing = self.insert(tck_fixture, idempotency_key="tck-parts-existing")
        plain = [tck_fixture.new_pending_job() for _ in range(2)]
        dup = tck_fixture.new_pending_job(idempotency_key="tck-parts-existing")
        keyed = tck_fixture.new_pending_job(idempotency_key="tck-parts-a")
        other = tck_fixture.new_pending_job(idempotency_key="tck-parts-b")
        repeat = tck_fixture.new_pending_job(idempotency_key="tck-parts-a")
        last = tck_fixture.new_pending_job()
        parts = [plain, [dup, keyed, other], [repeat, last]]
        assert streaming.bulk_insert_parts(parts) == 5
        assert store.find_by_id(dup.id) is None, "a key that exists is skipped"
        assert store.find_by_id(repeat.id) is None, "a key repeated in a later part is skipped"
        for job in (*plain, keyed, other, last):
            assert self.reload(store, job).idempotency_key == job.idempotency_key
        for key, owner in (
            ("tck-parts-existing", existing),
            ("tck-parts-a", keyed),
            ("tck-parts-b", other),
        ):
            found = store.find_by_idempotency_key(key)
            assert found is not None and found.id == owner.id, f"{key}: the first one stays"

    def test_an_invalid_job_in_a_later_part_writes_nothing(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        streaming = self.cap(tck_fixture, StreamingBulkStore)
        first = [tck_fixture.new_pending_job() for _ in range(3)]
        good = tck_fixture.new_pending_job()
        bad = tck_fixture.new_pending_job()
        object.__setattr__(bad, "tags", ("x" * 200,))
        with pytest.raises(StoreDataError) as caught:
            streaming.bulk_insert_parts(iter([first, [good, bad]]))
        assert "tag" in str(caught.value)
        for job in (*first, good, bad):
            assert store.find_by_id(job.id) is None, "bulk_insert_parts must be all or nothing"

    def test_an_integer_it_cannot_hold_in_a_later_part_is_never_changed(
        self, tck_fixture: StoreFixture
    ) -> None:
        """A ``max_retries`` of 2**40 in the second part is either refused with
        ``StoreDataError`` naming the field, writing nothing of any part, or stored as it is:
        never altered (a 32-bit column written by PostgreSQL's binary COPY keeps the low 32
        bits: 0)."""
        store = tck_fixture.store()
        streaming = self.cap(tck_fixture, StreamingBulkStore)
        first = [tck_fixture.new_pending_job() for _ in range(2)]
        big = tck_fixture.new_pending_job(max_retries=2**40)
        try:
            stored = streaming.bulk_insert_parts(iter([first, [big]]))
        except StoreDataError as exc:
            assert "max_retries" in str(exc)
            for job in (*first, big):
                assert store.find_by_id(job.id) is None, "bulk_insert_parts is all or nothing"
        else:
            assert stored == 3
            assert self.reload(store, big).max_retries == 2**40

    def test_parts_through_a_joined_view_are_undone_by_a_rollback(
        self, tck_fixture: StoreFixture
    ) -> None:
        store = tck_fixture.store()
        transaction = _transaction(tck_fixture)
        chunks: list[Sequence[JobEntity]] = [
            [tck_fixture.new_pending_job() for _ in range(2)],
            [tck_fixture.new_pending_job()],
        ]
        try:
            view = store.joined(transaction.handle)
            streaming = view.capability(StreamingBulkStore)
            if streaming is None:
                pytest.skip("the joined view offers no StreamingBulkStore: its parts cannot join")
            assert streaming.bulk_insert_parts(iter(chunks)) == 3
            for job in chunks[0]:
                assert view.find_by_id(job.id) is not None, "readable through the view"
        finally:
            transaction.rollback()
        for chunk in chunks:
            for job in chunk:
                assert store.find_by_id(job.id) is None, (
                    "the caller's rollback left a job of the parts behind: they did not join "
                    "the caller's transaction"
                )


__all__ = ["StreamingBulkStoreContract"]
