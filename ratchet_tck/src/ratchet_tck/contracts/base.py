# (capabilities are probed by passing their Protocol class: store.capability(LockStore))
"""What every contract class shares: the capability gate, cleanup and assertion helpers."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, ClassVar, TypeVar

import pytest

from ratchet_api.errors import StoreDataError, StoreError
from ratchet_api.store.entities import JobEntity
from ratchet_api.store.protocols import CAPABILITIES, JobStore
from ratchet_api.store.versions import SPI_1_0, STORE_SPI, SpiVersion, declared_spi_version
from ratchet_tck._session import ADVERTISED, SPI, subject_of
from ratchet_tck.fixture import StoreFixture, StoreTransaction
from ratchet_tck.versions import applies, target_version, versions_of

C = TypeVar("C")
T = TypeVar("T")

MS = timedelta(milliseconds=1)


class StoreContract:
    """Base of every contract class.

    ``capability`` is None for a required (core) contract; for a capability contract it is the
    protocol probed with ``store.capability(...)``: when the store does not advertise it, every
    test of the contract is skipped with ``N/A: store does not advertise <X>``.
    """

    __test__ = False
    capability: ClassVar[type | None] = None
    summary: ClassVar[str] = ""
    spi_since: ClassVar[SpiVersion] = SPI_1_0
    """The store SPI version that introduced the contract (its unmarked tests belong to it
    and every later version; ``ratchet_tck.versions.spi`` marks single tests)."""
    spi_target: SpiVersion = STORE_SPI
    """The version this run certifies the store for (set before each test)."""

    @pytest.fixture(autouse=True)
    def _tck_contract_scope(
        self, tck_fixture: StoreFixture, request: pytest.FixtureRequest
    ) -> Iterator[None]:
        store = tck_fixture.store()
        advertised = request.config.stash.setdefault(ADVERTISED, {})
        advertised.setdefault(subject_of(request.node), set()).update(
            kind.__name__ for kind in CAPABILITIES if store.capability(kind) is not None
        )
        cap = type(self).capability
        if cap is not None and store.capability(cap) is None:
            pytest.skip(f"N/A: store does not advertise {cap.__name__}")
        try:
            target = target_version(request.config.getoption("ratchet_tck_spi", None), store)
        except (ValueError, StoreError) as exc:
            pytest.fail(f"cannot tell which store SPI version to certify for: {exc}")
        request.config.stash.setdefault(SPI, {})[subject_of(request.node)] = (
            str(declared_spi_version(store)),
            str(target),
        )
        since, until = versions_of(type(self), getattr(request.node, "originalname", ""))
        if not applies(since, until, target):
            if until is None:
                which = f"{since}+"
            else:
                which = f"{since} only" if until == since else f"{since}..{until}"
            pytest.skip(f"N/A: a test of store SPI {which}, certifying for {target}")
        self.spi_target = target
        try:
            yield
        finally:
            tck_fixture.cleanup_store()

    # ---------------------------------------------------------------- helpers for subclasses

    @staticmethod
    def cap(fixture: StoreFixture, kind: Callable[..., C]) -> C:
        """The store as capability ``kind`` (the contract's gate already checked it exists)."""
        found = fixture.store().capability(kind)
        assert found is not None, f"store stopped advertising {getattr(kind, '__name__', kind)}"
        return found

    @staticmethod
    def need(fixture: StoreFixture, kind: Callable[..., C]) -> C:
        """The store as ``kind``, or skip this test as N/A when it is not advertised."""
        found = fixture.store().capability(kind)
        if found is None:
            pytest.skip(f"N/A: store does not advertise {getattr(kind, '__name__', kind)}")
        return found

    @staticmethod
    def insert(fixture: StoreFixture, **overrides: Any) -> JobEntity:
        """Insert a new pending job and return the stored entity."""
        return fixture.store().insert_job(fixture.new_pending_job(**overrides))

    @staticmethod
    def claim_one(store: JobStore, node_id: str = "tck-node") -> JobEntity:
        claimed = store.claim_next_batch(node_id, 1)
        assert len(claimed) == 1, f"expected to claim one due job, claimed {len(claimed)}"
        return claimed[0]

    @staticmethod
    def reload(store: JobStore, job: JobEntity) -> JobEntity:
        found = store.find_by_id(job.id)
        assert found is not None, f"job {job.id} vanished from the store"
        return found


def same_instant(a: datetime | None, b: datetime | None) -> bool:
    """Equal at millisecond precision (stores such as MongoDB keep milliseconds)."""
    if a is None or b is None:
        return a is b
    return abs(a - b) < MS


def assert_same_instant(actual: datetime | None, expected: datetime | None, what: str) -> None:
    assert same_instant(actual, expected), f"{what}: expected {expected}, store has {actual}"


def assert_aware_utc(value: datetime | None, what: str) -> None:
    assert value is not None, f"{what} is None"
    assert value.utcoffset() == timedelta(0), f"{what} must be aware UTC, got {value!r}"


@contextmanager
def raises_store_data_error(*fields: str) -> Iterator[None]:
    """Expect ``StoreDataError`` whose ``field`` (or message) names one of ``fields``."""
    with pytest.raises(StoreDataError) as caught:
        yield
    err = caught.value
    named = err.field in fields or any(f in str(err) for f in fields)
    assert named, f"StoreDataError must name one of {fields}, got field={err.field!r}: {err}"


def wait_until(check: Callable[[], T], timeout: float, what: str, step: float = 0.05) -> T:
    """Poll ``check`` until it returns something truthy (store clocks are not ours)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(step)


def caller_transaction(fixture: StoreFixture, consequence: str) -> StoreTransaction:
    """A caller's transaction from ``fixture.begin_transaction()``; the test is skipped when
    the fixture gives none (``consequence``: what the store then cannot do)."""
    begin = getattr(fixture, "begin_transaction", None)
    transaction = begin() if callable(begin) else None
    if transaction is None:
        pytest.skip(
            "the fixture's begin_transaction() gives no transaction: the store cannot join "
            f"callers' transactions{consequence}"
        )
    assert isinstance(transaction, StoreTransaction)
    return transaction


def naive(dt: datetime) -> datetime:
    return dt.replace(tzinfo=None)


__all__ = [
    "MS",
    "StoreContract",
    "assert_aware_utc",
    "assert_same_instant",
    "naive",
    "raises_store_data_error",
    "same_instant",
    "wait_until",
]
