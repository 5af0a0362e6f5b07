"""The frozen store SPI 1.0 store (``tests/tck/v1_store``, plain sqlite3, mandatory protocols
only, no version declared) certifies for 1.0 with today's TCK; certified for the current
version it fails exactly the tests of the later version, and the report says so; a store at the
current version certifies for it.

Every later SPI version must keep this module green: it is the proof that a store written for
an older minor version still certifies for that version (docs/stores/changelog.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ratchet_api.store.versions import SPI_1_0, SPI_1_1, STORE_SPI
from ratchet_tck import ALL_CONTRACTS, StoreFixture, contract_test_classes, is_required
from ratchet_tck.report import VERDICT_COMPATIBLE, VERDICT_NOT_COMPATIBLE
from ratchet_tck.versions import versions_of
from tests.tck.v1_support import V1_SRC, V1_STORE, import_v1_store

import_v1_store()
from ratchet_v1_sqlite.tck import V1SqliteFixture  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tck_fixture(tmp_path: Path) -> Iterator[StoreFixture]:
    fixture = V1SqliteFixture(str(tmp_path / "tck.db"))
    yield fixture
    fixture.cleanup_store()
    fixture.close()


# Every contract against the 1.0 store: the store declares no version, so the TCK certifies it
# for 1.0 (tests of 1.1 skip as N/A, which does not block).
globals().update(contract_test_classes())


def _report(
    tmp_path: Path, fixture: str, *extra: str, src: Path = V1_SRC
) -> tuple[int, dict[str, object]]:
    out = tmp_path / "report"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(src), str(ROOT)])
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ratchet_tck.cli",
            "report",
            "--fixture",
            fixture,
            "--out",
            str(out),
            "--name",
            "store",
            *extra,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
        check=False,
    )
    reports = list(out.glob("*.json"))
    assert len(reports) == 1, done.stdout + done.stderr
    data: dict[str, object] = json.loads(reports[0].read_text())
    markdown = reports[0].with_suffix(".md").read_text()
    data["_markdown"] = markdown
    data["_stdout"] = done.stdout
    return done.returncode, data


def _required_tests_of(version_check: object) -> set[str]:
    names = set()
    for contract in ALL_CONTRACTS:
        if not is_required(contract):
            continue
        for name in dir(contract):
            if name.startswith("test_") and version_check(versions_of(contract, name)):  # type: ignore[operator]
                names.add(f"{contract.__name__}.{name}")
    return names


def test_the_report_certifies_the_1_0_store_for_1_0_and_says_what_it_loses(
    tmp_path: Path,
) -> None:
    code, data = _report(tmp_path, "ratchet_v1_sqlite.tck:make_fixture")
    assert code == 0, data["_stdout"]
    assert data["verdict"] == VERDICT_COMPATIBLE
    spi = data["spi"]
    assert isinstance(spi, dict)
    assert (spi["declared"], spi["certified_for"], spi["met"]) == ("1.0", "1.0", "1.0")
    assert spi["newest"] == str(STORE_SPI)
    assert spi["contracts_by_version"]["JobClaimStoreContract"] == {"1.0": 11, "1.1": 2}
    lost = {c["member"]: c["lost"] for c in spi["older_store_loses"]}
    assert "JobClaimStore.mark_dispatched" in lost
    assert "workflow steps" in lost["JobBatchStatusStore.settle_children"]
    markdown = str(data["_markdown"])
    assert "Store SPI: certified for **1.0**, met: **1.0**" in markdown
    assert "## What a store at SPI 1.0 loses" in markdown
    assert "for store SPI 1.0" in str(data["_stdout"])


def test_certified_for_1_1_the_1_0_store_fails_exactly_the_tests_of_1_1(tmp_path: Path) -> None:
    code, data = _report(tmp_path, "ratchet_v1_sqlite.tck:make_fixture", "--spi", "1.1")
    assert code == 1
    assert data["verdict"] == VERDICT_NOT_COMPATIBLE
    spi = data["spi"]
    assert isinstance(spi, dict) and (spi["certified_for"], spi["met"]) == ("1.1", None)
    contracts = data["contracts"]
    assert isinstance(contracts, list)
    failed = {f"{c['name']}.{t}" for c in contracts for t in c["failures"]}
    new_in_1_1 = _required_tests_of(lambda v: v[0] == SPI_1_1)
    # the 1.0 store lacks every method of 1.1; the field check of the crud test is 1.1's too
    assert failed == new_in_1_1 | {"JobCrudStoreContract.test_insert_then_find_returns_every_field"}
    # the tests 1.1 replaced are not run for 1.1
    skipped = {r for c in contracts for r in c["skip_reasons"]}
    assert any("of store SPI 1.0 only, certifying for 1.1" in r for r in skipped)


def test_a_store_at_the_current_version_certifies_for_it(tmp_path: Path) -> None:
    code, data = _report(tmp_path, "ratchet_tck.memory:InMemoryStoreFixture")
    assert code == 0, data["_stdout"]
    spi = data["spi"]
    assert isinstance(spi, dict)
    assert (spi["declared"], spi["certified_for"], spi["met"]) == ("1.1", "1.1", "1.1")
    assert spi["older_store_loses"] == []
    assert data["totals"]["failed"] == 0  # type: ignore[index]


def test_a_version_the_tck_does_not_know_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ratchet_tck.cli",
            "report",
            "--fixture",
            "ratchet_tck.memory:InMemoryStoreFixture",
            "--out",
            str(tmp_path),
            "--spi",
            "7.3",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--spi '7.3'" in done.stderr and "1.0, 1.1" in done.stderr
    assert SPI_1_0 < SPI_1_1 == STORE_SPI


def test_the_changelog_diff_moves_the_1_0_store_to_1_1(tmp_path: Path) -> None:
    """docs/stores/changelog.md's sqlite3 diff applies to the frozen 1.0 store and the result
    certifies for 1.1: the migration guide is exactly what a store needs."""
    text = (ROOT / "docs" / "stores" / "changelog.md").read_text()
    marker = text.index("<!-- sqlite-1.0-to-1.1")
    found = re.search(r"```diff\n(.*?)```", text[marker:], flags=re.S)
    assert found is not None
    moved = tmp_path / "store"
    shutil.copytree(V1_STORE, moved, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "v1.1.diff").write_text(found.group(1))
    applied = subprocess.run(
        ["git", "apply", "--verbose", str(tmp_path / "v1.1.diff")],
        cwd=moved,
        capture_output=True,
        text=True,
        check=False,
    )
    assert applied.returncode == 0, applied.stderr
    code, data = _report(tmp_path, "ratchet_v1_sqlite.tck:make_fixture", src=moved / "src")
    assert code == 0, data["_stdout"]
    spi = data["spi"]
    assert isinstance(spi, dict)
    assert (spi["declared"], spi["certified_for"], spi["met"]) == ("1.1", "1.1", "1.1")
    assert spi["older_store_loses"] == []
