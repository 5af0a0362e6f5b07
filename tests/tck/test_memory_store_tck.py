"""The reference in-memory store certifies itself against every TCK contract."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ratchet_tck import StoreFixture, contract_test_classes
from ratchet_tck.memory import InMemoryStoreFixture


@pytest.fixture
def tck_fixture() -> Iterator[StoreFixture]:
    fixture = InMemoryStoreFixture()
    yield fixture
    fixture.cleanup_store()


globals().update(contract_test_classes())
