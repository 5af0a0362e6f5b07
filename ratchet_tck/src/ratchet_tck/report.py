"""The compatibility report: per contract passed / failed / N/A / missing, test counts, the
capabilities the store advertises, and the verdict."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import attrs

from ratchet_api.store.versions import (
    MIGRATION_GUIDE,
    SPI_1_0,
    STORE_SPI,
    changes_since,
    parse_spi_version,
)
from ratchet_tck.contracts.base import StoreContract
from ratchet_tck.registry import ALL_CONTRACTS
from ratchet_tck.versions import tests_by_version

# Kept in step with the engine: a test checks that every optional capability has an entry.

VERDICT_COMPATIBLE = "Ratchet Store Compatible"
VERDICT_NOT_COMPATIBLE = "Not compatible"
NA_PREFIX = "N/A:"

CAPABILITY_FEATURES: Mapping[str, str] = {
    "JobQueryStore": "`JobScheduler.search` and `ratchet jobs list` (UnsupportedCapabilityError); "
    "`ratchet worker --burst` does not wait for retries due before its timeout",
    "JobAuditStore": "execution records and stored per-job logs (`ratchet jobs show` shows "
    "neither); Django task results lose per-attempt start times and worker ids",
    "JobExtensionStore": "`JobContext.get_state`/`set_state` (UnsupportedCapabilityError) and "
    "job properties; Django task results keep only the last error",
    "LockStore": "the startup lease: orphan recovery is not serialised between nodes",
    "RecurringJobStore": "recurring jobs (`scheduler.recurring`, `@recurring`, configured "
    "schedules): UnsupportedCapabilityError",
    "BatchStore": "batches and streaming batches (`scheduler.batch`, `streaming_batch`)",
    "WorkflowConditionStore": "workflow steps and callbacks (`then`, `branch`, `on_success`, "
    "`on_failure`)",
    "SignalStore": "`await_signal` and `scheduler.signal`",
    "ResourcePermitStore": "resource permits (`.resource(key, permits=N)`)",
    "FlowControlStore": "resource permits and rate limits (`.resource`, `.rate_limit`)",
    "ArchiveStore": "retention (finished jobs are never archived nor purged by age)",
    "JobAnalyticsStore": "the dashboard's overview figures (throughput, queue wait percentiles)",
    "SealedValueStore": "`ratchet keys rotate` and `ratchet keys status`",
    "SealedArchiveStore": "re-sealing archived jobs: `ratchet keys rotate` and `ratchet keys "
    "status` cover live jobs only, and a key that sealed archived values must stay configured",
    "QueueStatsStore": "exact queue figures: the Prometheus queue gauges and the dashboard's "
    "queues page read a bounded scan of the newest jobs instead",
    "FairClaimStore": "fairness under load: claims keep the plain order, so one fairness "
    "key's backlog delays the jobs of every other key",
    "WorkerBatchStore": "nothing but round trips: started marks after the start, one "
    "statement per failed job",
    "StreamingBulkStore": "nothing but time: a bulk enqueue builds every job before the store "
    "writes the first one",
}
"""What the engine cannot do on a store without each optional capability (the report lists it
for every capability the store does not advertise)."""

Outcome = Literal["passed", "failed", "skipped"]
ContractStatus = Literal["passed", "failed", "n/a", "missing"]


@attrs.frozen(kw_only=True)
class TestOutcome:
    """The final outcome of one contract test (a failure in any phase makes it failed)."""

    contract: str
    test: str
    outcome: Outcome
    reason: str = ""


@attrs.frozen(kw_only=True)
class ContractResult:
    name: str
    required: bool
    capability: str | None
    status: ContractStatus
    passed: int
    failed: int
    skipped: int
    total: int
    failures: tuple[str, ...] = ()
    skip_reasons: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class CompatibilityReport:
    name: str
    generated_at: datetime
    capabilities: tuple[str, ...]
    contracts: tuple[ContractResult, ...]
    spi_declared: str = str(SPI_1_0)
    """The store SPI version the store declares (``ratchet_store_spi``; 1.0 without one)."""
    spi_target: str = str(STORE_SPI)
    """The version the run certified the store for (``--ratchet-tck-spi``, else declared)."""

    @property
    def blocking(self) -> list[ContractResult]:
        """Contracts that prevent the verdict: a required contract (or the contract of an
        advertised capability) that failed or did not run."""
        return [
            c
            for c in self.contracts
            if (c.required or c.capability in self.capabilities)
            and c.status in ("failed", "missing")
        ]

    @property
    def compatible(self) -> bool:
        return not self.blocking

    @property
    def verdict(self) -> str:
        return VERDICT_COMPATIBLE if self.compatible else VERDICT_NOT_COMPATIBLE

    def disabled_features(self) -> dict[str, str]:
        """Each optional capability the store does not advertise, with what that disables."""
        return {
            name: CAPABILITY_FEATURES.get(name, "see the capability's contract")
            for c in self.contracts
            if (name := c.capability) is not None and name not in self.capabilities
        }

    @property
    def spi_met(self) -> str | None:
        """The store SPI version the store meets: the version certified for when compatible,
        else None."""
        return self.spi_target if self.compatible else None

    def contracts_by_version(self) -> dict[str, dict[str, int]]:
        """Per contract, how many of its tests each SPI version introduced (a store certified
        for a version runs the tests of that version and every earlier one, except tests that
        a later version replaced)."""
        return {
            c.__name__: {str(v): len(tests) for v, tests in tests_by_version(c).items()}
            for c in ALL_CONTRACTS
            if c.__name__ in {r.name for r in self.contracts}
        }

    def later_versions(self) -> list[dict[str, str]]:
        """What the engine adds after the certified version: for a store at an older version,
        each change with what the store loses and the engine's fallback."""
        target = parse_spi_version(self.spi_target)
        return [
            {
                "version": str(c.version),
                "member": c.member,
                "change": c.change,
                "lost": c.lost,
                "fallback": c.fallback,
            }
            for c in changes_since(target)
        ]

    def totals(self) -> dict[str, int]:
        return {
            key: sum(getattr(c, key) for c in self.contracts)
            for key in ("passed", "failed", "skipped", "total")
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "generated_at": self.generated_at.isoformat(),
            "verdict": self.verdict,
            "compatible": self.compatible,
            "spi": {
                "declared": self.spi_declared,
                "certified_for": self.spi_target,
                "met": self.spi_met,
                "newest": str(STORE_SPI),
                "contracts_by_version": self.contracts_by_version(),
                "older_store_loses": self.later_versions(),
            },
            "capabilities": list(self.capabilities),
            "disabled_features": self.disabled_features(),
            "totals": self.totals(),
            "contracts": [
                {
                    "name": c.name,
                    "required": c.required,
                    "capability": c.capability,
                    "status": c.status,
                    "passed": c.passed,
                    "failed": c.failed,
                    "skipped": c.skipped,
                    "total": c.total,
                    "failures": list(c.failures),
                    "skip_reasons": list(c.skip_reasons),
                }
                for c in self.contracts
            ],
        }

    def to_markdown(self) -> str:
        t = self.totals()
        lines = [
            f"# Ratchet store compatibility report: {self.name}",
            "",
            f"**Verdict: {self.verdict}**",
            "",
            f"Store SPI: certified for **{self.spi_target}**"
            + (f", met: **{self.spi_met}**" if self.spi_met else ", not met")
            + f" (the store declares {self.spi_declared}; this TCK's newest is {STORE_SPI}).",
            "",
            f"Generated {self.generated_at.isoformat(timespec='seconds')}; "
            f"{len(self.contracts)} contracts, {t['total']} tests: {t['passed']} passed, "
            f"{t['failed']} failed, {t['skipped']} skipped.",
            "",
            "Capabilities advertised: "
            + (", ".join(f"`{c}`" for c in self.capabilities) or "none"),
            "",
            "| contract | kind | result | passed | failed | skipped | total "
            "| SPI versions (tests) |",
            "|---|---|---|---:|---:|---:|---:|---|",
        ]
        by_version = self.contracts_by_version()
        for c in self.contracts:
            kind = "required" if c.required else f"capability `{c.capability}`"
            versions = ", ".join(f"{v}: {n}" for v, n in by_version.get(c.name, {}).items())
            lines.append(
                f"| {c.name} | {kind} | {c.status} | {c.passed} | {c.failed} | {c.skipped} "
                f"| {c.total} | {versions} |"
            )
        if self.blocking:
            lines += ["", "## Why not compatible", ""]
            for c in self.blocking:
                what = "did not run" if c.status == "missing" else "failed"
                lines.append(
                    f"- {c.name} {what}" + (f": {', '.join(c.failures)}" if c.failures else "")
                )
        disabled = self.disabled_features()
        if disabled:
            lines += ["", "## What the missing capabilities disable", ""]
            lines += [f"- `{name}`: {what}" for name, what in disabled.items()]
        later = self.later_versions()
        if later:
            lines += [
                "",
                f"## What a store at SPI {self.spi_target} loses",
                "",
                f"The engine runs a store of an older minor version through its compatibility "
                f"adapter; these features of later versions are disabled (see "
                f"{MIGRATION_GUIDE} to move the store up):",
                "",
            ]
            lines += [
                f"- {c['version']} `{c['member']}`: {c['lost']} (engine: {c['fallback']})"
                for c in later
            ]
        skips = [(c.name, r) for c in self.contracts if c.status != "n/a" for r in c.skip_reasons]
        if skips:
            lines += ["", "## Skipped tests", ""]
            lines += [f"- {name}: {reason}" for name, reason in skips]
        return "\n".join(lines) + "\n"

    def write(self, directory: Path | str) -> tuple[Path, Path]:
        """Write ``<slug>.json`` and ``<slug>.md`` into ``directory``; returns both paths."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", self.name).strip("-") or "store"
        json_path = out / f"{slug}.json"
        md_path = out / f"{slug}.md"
        json_path.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
        md_path.write_text(self.to_markdown(), encoding="utf-8")
        return json_path, md_path


def _result(contract: type[StoreContract], outcomes: list[TestOutcome]) -> ContractResult:
    passed = sum(o.outcome == "passed" for o in outcomes)
    failed = sum(o.outcome == "failed" for o in outcomes)
    skipped = [o for o in outcomes if o.outcome == "skipped"]
    status: ContractStatus
    if failed:
        status = "failed"
    elif passed:
        status = "passed"
    elif skipped and all(o.reason.startswith(NA_PREFIX) for o in skipped):
        status = "n/a" if contract.capability is not None else "missing"
    else:
        status = "missing"
    cap = contract.capability
    return ContractResult(
        name=contract.__name__,
        required=cap is None,
        capability=cap.__name__ if cap is not None else None,
        status=status,
        passed=passed,
        failed=failed,
        skipped=len(skipped),
        total=len(outcomes),
        failures=tuple(o.test for o in outcomes if o.outcome == "failed"),
        skip_reasons=tuple(sorted({f"{o.test}: {o.reason}" for o in skipped})),
    )


def build_report(
    name: str,
    outcomes: Iterable[TestOutcome],
    capabilities: Iterable[str],
    contracts: tuple[type[StoreContract], ...] = ALL_CONTRACTS,
    generated_at: datetime | None = None,
    *,
    spi_declared: str = str(SPI_1_0),
    spi_target: str = str(STORE_SPI),
) -> CompatibilityReport:
    """Summarize test outcomes per contract. A contract with no outcome is ``missing``."""
    by_contract: Mapping[str, list[TestOutcome]] = {c.__name__: [] for c in contracts}
    for o in outcomes:
        if o.contract in by_contract:
            by_contract[o.contract].append(o)
    return CompatibilityReport(
        name=name,
        generated_at=generated_at or datetime.now(UTC),
        capabilities=tuple(sorted(set(capabilities))),
        contracts=tuple(_result(c, by_contract[c.__name__]) for c in contracts),
        spi_declared=spi_declared,
        spi_target=spi_target,
    )


__all__ = [
    "NA_PREFIX",
    "VERDICT_COMPATIBLE",
    "VERDICT_NOT_COMPATIBLE",
    "CompatibilityReport",
    "ContractResult",
    "TestOutcome",
    "build_report",
]
