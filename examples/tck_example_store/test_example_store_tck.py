"""Certify the example store: every TCK contract becomes a test class of this module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from example_fixture import ExampleStoreFixture

from ratchet_tck import StoreFixture, contract_test_classes


@pytest.fixture
def tck_fixture() -> Iterator[StoreFixture]:
    fixture = ExampleStoreFixture()
    yield fixture
    fixture.cleanup_store()


globals().update(contract_test_classes())
