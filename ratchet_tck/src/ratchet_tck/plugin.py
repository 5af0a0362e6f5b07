"""The pytest plugin (entry point ``pytest11: ratchet_tck``).

Options: ``--ratchet-tck-report=DIR`` writes the compatibility report of every contract test
that ran in the session; ``--ratchet-tck-name`` names the store in it; ``--ratchet-tck-spi=1.0``
certifies for that store SPI version (default: the version the store declares); ``--ratchet-tck-fixture=
pkg.module:factory`` provides the ``tck_fixture`` fixture from an import path (a store's own
``tck_fixture`` fixture takes precedence).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ratchet_api.store.versions import SPI_1_0, STORE_SPI
from ratchet_tck._session import ADVERTISED, SPI, subject_of
from ratchet_tck.contracts.base import StoreContract
from ratchet_tck.fixture import StoreFixture
from ratchet_tck.loader import open_fixture
from ratchet_tck.registry import ALL_CONTRACTS
from ratchet_tck.report import CompatibilityReport, Outcome, TestOutcome, build_report


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ratchet-tck", "Ratchet store TCK")
    group.addoption(
        "--ratchet-tck-report",
        metavar="DIR",
        default=None,
        help="write the Ratchet store compatibility report (JSON + Markdown) into DIR",
    )
    group.addoption(
        "--ratchet-tck-name",
        metavar="NAME",
        default="store",
        help="the store name shown in the compatibility report",
    )
    group.addoption(
        "--ratchet-tck-spi",
        metavar="VERSION",
        default=None,
        help="certify for this store SPI version (e.g. 1.0); default: the version the store "
        "declares (ratchet_store_spi; 1.0 when it declares none)",
    )
    group.addoption(
        "--ratchet-tck-fixture",
        metavar="IMPORT",
        default=None,
        help="pkg.module:factory returning a StoreFixture (or a context manager yielding one)",
    )


@pytest.fixture(scope="session")
def tck_fixture(request: pytest.FixtureRequest) -> Iterator[StoreFixture]:
    """The store under test, from ``--ratchet-tck-fixture`` (override it in your test module)."""
    spec = request.config.getoption("ratchet_tck_fixture")
    if not spec:
        pytest.fail(
            "no store to certify: define a 'tck_fixture' fixture or pass "
            "--ratchet-tck-fixture=package.module:factory"
        )
    with open_fixture(str(spec)) as fixture:
        fixture.cleanup_store()
        yield fixture


def _contract_of(item: pytest.Item) -> type[StoreContract] | None:
    cls = getattr(item, "cls", None)
    if cls is None:
        return None
    return next((c for c in cls.__mro__ if c in ALL_CONTRACTS), None)


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


class _Recorder:
    """Collects the outcome of every contract test of one session and writes the reports."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.items: dict[str, tuple[str, str, str]] = {}  # nodeid -> subject, contract, test
        self.outcomes: dict[str, tuple[str, TestOutcome]] = {}
        self.written: list[tuple[CompatibilityReport, Path]] = []

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            contract = _contract_of(item)
            if contract is not None:
                test = getattr(item, "originalname", item.name)
                self.items[item.nodeid] = (subject_of(item), contract.__name__, test)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.nodeid not in self.items:
            return
        subject, contract, test = self.items[report.nodeid]
        previous = self.outcomes.get(report.nodeid)
        if previous is not None and previous[1].outcome == "failed":
            return
        outcome: Outcome
        reason = ""
        if report.failed:
            outcome = "failed"
        elif report.skipped:
            outcome, reason = "skipped", _skip_reason(report)
        elif report.when == "call":
            outcome = "passed"
        else:
            return
        self.outcomes[report.nodeid] = (
            subject,
            TestOutcome(contract=contract, test=test, outcome=outcome, reason=reason),
        )

    def reports(self) -> list[CompatibilityReport]:
        """One report per subject (per ``tck_fixture`` parametrization) of this session."""
        name = str(self.config.getoption("ratchet_tck_name"))
        advertised = self.config.stash.get(ADVERTISED, {})
        versions = self.config.stash.get(SPI, {})
        subjects = sorted({s for s, _ in self.outcomes.values()} | set(advertised))
        reports = []
        for subject in subjects:
            mine = [o for s, o in self.outcomes.values() if s == subject]
            full = f"{name}[{subject}]" if subject else name
            declared, target = versions.get(subject, (str(SPI_1_0), str(STORE_SPI)))
            reports.append(
                build_report(
                    full,
                    mine,
                    advertised.get(subject, set()),
                    spi_declared=declared,
                    spi_target=target,
                )
            )
        return reports

    def pytest_sessionfinish(self) -> None:
        out = self.config.getoption("ratchet_tck_report")
        if not out:
            return
        for report in self.reports():
            json_path, _ = report.write(Path(str(out)))
            self.written.append((report, json_path))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.written:
            return
        terminalreporter.write_sep("=", "Ratchet TCK")
        for report, path in self.written:
            t = report.totals()
            terminalreporter.write_line(
                f"{report.name}: {report.verdict} for store SPI {report.spi_target} "
                f"({t['passed']} passed, {t['failed']} failed, "
                f"{t['skipped']} skipped of {t['total']} tests); {path}"
            )


RECORDER = pytest.StashKey[_Recorder]()


def pytest_configure(config: pytest.Config) -> None:
    recorder = _Recorder(config)
    config.stash[RECORDER] = recorder
    config.pluginmanager.register(recorder, "ratchet-tck-recorder")
