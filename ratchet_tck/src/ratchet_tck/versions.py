"""Which store SPI version each contract test belongs to, and the version a run certifies for.

Every contract test belongs to the versions ``since..until`` (``until`` None: every later
version). A test without a mark belongs to its contract's ``spi_since`` (1.0 unless the contract
says otherwise) onwards. A run certifies a store for one version, the *target*: the
``--ratchet-tck-spi`` option (``ratchet-tck report --spi 1.0``) or else the version the store
declares (``ratchet_store_spi``; none declared: 1.0). Tests of other versions are skipped as
``N/A: store SPI ...``, which never blocks the verdict.

A test is marked when the SPI changes: a method added in 1.1 gets ``@spi(since=SPI_1_1)``; a test
of a 1.0 behaviour that 1.1 replaced keeps running for 1.0 stores with ``@spi(until=SPI_1_0)``
beside the 1.1 test of the new behaviour.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TypeVar

from ratchet_api.store.versions import (
    KNOWN_VERSIONS,
    SPI_1_0,
    STORE_SPI,
    SpiVersion,
    declared_spi_version,
    parse_spi_version,
)

F = TypeVar("F", bound=Callable[..., object])

_MARK = "__ratchet_tck_spi__"


def spi(*, since: SpiVersion = SPI_1_0, until: SpiVersion | None = None) -> Callable[[F], F]:
    """Mark a contract test as belonging to the store SPI versions ``since..until``."""

    def mark(test: F) -> F:
        setattr(test, _MARK, (since, until))
        return test

    return mark


def versions_of(contract: type, test_name: str) -> tuple[SpiVersion, SpiVersion | None]:
    """``(since, until)`` of ``contract.test_name`` (its mark, else the contract's
    ``spi_since`` onwards)."""
    test = getattr(contract, test_name, None)
    marked = getattr(test, _MARK, None)
    if marked is not None:
        since, until = marked
        return since, until
    return getattr(contract, "spi_since", SPI_1_0), None


def applies(since: SpiVersion, until: SpiVersion | None, target: SpiVersion) -> bool:
    """Whether a test of ``since..until`` certifies a store for ``target``."""
    return since <= target and (until is None or target <= until)


def tests_by_version(contract: type) -> dict[SpiVersion, list[str]]:
    """The contract's test names by the version that introduced them, for every known version
    the contract has tests in (a test ``until`` a version is listed under its ``since``)."""
    grouped: dict[SpiVersion, list[str]] = {}
    for name, _ in inspect.getmembers(contract, inspect.isfunction):
        if name.startswith("test_"):
            since, _until = versions_of(contract, name)
            grouped.setdefault(since, []).append(name)
    return dict(sorted(grouped.items()))


def replaced_tests(contract: type) -> dict[str, SpiVersion]:
    """Tests that stop at a version (``until``), by name: a later version replaced them."""
    found = {}
    for name, _ in inspect.getmembers(contract, inspect.isfunction):
        if name.startswith("test_"):
            _since, until = versions_of(contract, name)
            if until is not None:
                found[name] = until
    return found


def target_version(option: object, store: object) -> SpiVersion:
    """The version a run certifies for: ``option`` (``"1.0"``, or None/"" for the store's
    declaration) else what ``store`` declares. ``StoreSpiVersionError`` for a malformed value;
    ``ValueError`` for a version the TCK does not know."""
    version = parse_spi_version(option) if option else declared_spi_version(store)
    if version not in KNOWN_VERSIONS:
        known = ", ".join(str(v) for v in KNOWN_VERSIONS)
        raise ValueError(
            f"this ratchet-tck certifies store SPI {known}; cannot certify for {version} "
            f"(the TCK's newest is {STORE_SPI})"
        )
    return version


__all__ = [
    "applies",
    "replaced_tests",
    "spi",
    "target_version",
    "tests_by_version",
    "versions_of",
]
