"""The contracts can fail: each deliberately broken store fails the contract that covers its
defect, and the report refuses the "Ratchet Store Compatible" verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import ratchet_tck as tck
from ratchet_tck.contracts.base import StoreContract
from ratchet_tck.contracts.joined import JobStoreJoinedContract
from ratchet_tck.report import VERDICT_COMPATIBLE
from ratchet_tck.runner import run_contracts

# (fixture factory in tests.tck.broken_stores, contract that must fail, a test that must fail)
CASES: list[tuple[str, type[StoreContract], str]] = [
    (
        "DoubleClaimFixture",
        tck.JobClaimStoreContract,
        "test_concurrent_claims_from_threads_claim_each_job_once",
    ),
    (
        "FifoClaimFixture",
        tck.JobClaimStoreContract,
        "test_claim_order_is_priority_then_due_time_then_id",
    ),
    (
        "StaleCompletionFixture",
        tck.JobTerminalStoreContract,
        "test_stale_claim_seq_cannot_complete",
    ),
    (
        "CancelTerminalFixture",
        tck.JobTerminalStoreContract,
        "test_cancel_of_terminal_or_missing_job_is_refused",
    ),
    ("UnlockIgnoresOwnerFixture", tck.LockStoreContract, "test_unlock_checks_the_owner"),
    ("RenewIgnoresOwnerFixture", tck.LockStoreContract, "test_renew_checks_the_owner_and_extends"),
    (
        "ExpiredLeaseStuckFixture",
        tck.LockStoreContract,
        "test_expired_lease_is_reclaimed_without_the_old_holder",
    ),
    ("RacyLockFixture", tck.LockStoreContract, "test_one_of_many_racing_owners_acquires"),
    (
        "StateIgnoresVersionFixture",
        tck.JobExtensionStoreContract,
        "test_update_state_is_a_compare_and_set_on_version",
    ),
    (
        "StateIgnoresFenceFixture",
        tck.JobExtensionStoreContract,
        "test_superseded_is_checked_before_the_version",
    ),
    ("PropertyOverwriteFixture", tck.JobExtensionStoreContract, "test_put_property_is_write_once"),
    (
        "LostIncrementFixture",
        tck.BatchStoreContract,
        "test_concurrent_increments_never_lose_a_count",
    ),
    ("ClientClockHeartbeatFixture", tck.NodeStoreContract, "test_heartbeat_uses_the_store_clock"),
    ("LongTagFixture", tck.TagStoreContract, "test_too_long_tag_is_refused_naming_the_field"),
    (
        "RacyOrphanResetFixture",
        tck.JobBulkStoreContract,
        "test_reset_orphan_jobs_spares_a_node_that_heartbeat_again",
    ),
    (
        "RacyOrphanResetFixture",
        tck.JobBulkStoreContract,
        "test_reset_orphan_jobs_spares_jobs_claimed_after_the_cutoff",
    ),
    (
        "ArchiveCopiesFixture",
        tck.DualWriteInvariantContract,
        "test_job_is_in_exactly_one_place_around_archiving",
    ),
    (
        "ArchiveDropsStateFixture",
        tck.DualWriteInvariantContract,
        "test_tags_properties_and_state_survive_archiving",
    ),
    (
        "DeleteLeavesPropertiesFixture",
        tck.DualWriteInvariantContract,
        "test_delete_removes_every_owned_row",
    ),
    ("DoubleSignalFixture", tck.SignalStoreContract, "test_concurrent_deliveries_have_one_winner"),
    (
        "PermitOverLimitFixture",
        tck.ResourcePermitStoreContract,
        "test_expired_permits_do_not_count",
    ),
    (
        "FutureCountedDueFixture",
        tck.QueueStatsStoreContract,
        "test_pending_due_and_oldest_per_execution_target_and_band",
    ),
    *(
        ("JoinedLivenessFixture", tck.TransactionBoundaryContract, test)
        for test in (
            "test_a_heartbeat_through_a_joined_view_survives_the_callers_rollback",
            "test_node_deletions_through_a_joined_view_survive_the_callers_rollback",
            "test_lock_writes_through_a_joined_view_survive_the_callers_rollback",
            "test_a_heartbeat_after_the_caller_wrote_commits_on_its_own_or_is_refused_at_once",
        )
    ),
]


def _contract(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in data["contracts"] if c["name"] == name)


@pytest.mark.parametrize(
    ("factory", "contract", "failing_test"),
    CASES,
    ids=[c[0].removesuffix("Fixture") for c in CASES],
)
def test_contract_fails_against_a_store_with_that_defect(
    tmp_path: Path, factory: str, contract: type[StoreContract], failing_test: str
) -> None:
    code, data = run_contracts(
        f"tests.tck.broken_stores:{factory}",
        tmp_path,
        factory,
        contracts=[contract],
        in_process=True,
    )
    assert code == pytest.ExitCode.TESTS_FAILED
    result = _contract(data, contract.__name__)
    assert result["status"] == "failed"
    assert failing_test in result["failures"], result["failures"]
    assert data["verdict"] != VERDICT_COMPATIBLE
    assert data["compatible"] is False
    md = (tmp_path / f"{factory}.md").read_text()
    assert f"| {contract.__name__} |" in md and "Why not compatible" in md


def test_the_same_contracts_pass_against_the_sound_store(tmp_path: Path) -> None:
    contracts = sorted({c for _, c, _ in CASES}, key=lambda c: c.__name__)
    code, data = run_contracts(
        "ratchet_tck.memory:InMemoryStoreFixture",
        tmp_path,
        "sound",
        contracts=contracts,
        in_process=True,
    )
    assert code == pytest.ExitCode.OK
    for contract in contracts:
        assert _contract(data, contract.__name__)["status"] == "passed"


def test_the_transaction_boundary_contract_passes_on_a_store_that_keeps_requires_new(
    tmp_path: Path,
) -> None:
    contracts = [tck.TransactionBoundaryContract, JobStoreJoinedContract]
    code, data = run_contracts(
        "tests.tck.broken_stores:TransactionalMemoryFixture",
        tmp_path,
        "transactional",
        contracts=contracts,
        in_process=True,
    )
    assert code == pytest.ExitCode.OK
    for contract in contracts:
        result = _contract(data, contract.__name__)
        assert (result["status"], result["skipped"]) == ("passed", 0), result


def test_a_required_contract_that_did_not_run_blocks_the_verdict(tmp_path: Path) -> None:
    code, data = run_contracts(
        "ratchet_tck.memory:InMemoryStoreFixture",
        tmp_path,
        "partial",
        contracts=[tck.JobCrudStoreContract],
        in_process=True,
    )
    assert code == pytest.ExitCode.OK
    assert _contract(data, "JobCrudStoreContract")["status"] == "passed"
    assert _contract(data, "JobClaimStoreContract")["status"] == "missing"
    assert data["verdict"] != VERDICT_COMPATIBLE


def test_store_without_capabilities_is_compatible_with_na_contracts(tmp_path: Path) -> None:
    code, data = run_contracts(
        "tests.tck.broken_stores:CoreOnlyFixture", tmp_path, "core-only", in_process=True
    )
    assert code == pytest.ExitCode.OK
    assert data["capabilities"] == []
    for c in data["contracts"]:
        if c["required"]:
            assert c["status"] == "passed", c
        else:
            assert c["status"] == "n/a", c
            assert c["skipped"] == c["total"] > 0
    assert data["verdict"] == VERDICT_COMPATIBLE
    md = (tmp_path / "core-only.md").read_text()
    assert "| LockStoreContract | capability `LockStore` | n/a |" in md
    # the report says what each absent capability disables, for every optional capability
    from ratchet_api.store.protocols import CAPABILITIES
    from ratchet_tck.report import CAPABILITY_FEATURES

    optional = {c["capability"] for c in data["contracts"] if not c["required"]}
    assert set(data["disabled_features"]) == optional
    assert optional <= set(CAPABILITY_FEATURES)
    assert {kind.__name__ for kind in CAPABILITIES} - {"SchemaManager"} <= set(CAPABILITY_FEATURES)
    assert "## What the missing capabilities disable" in md
    assert f"- `JobQueryStore`: {CAPABILITY_FEATURES['JobQueryStore']}" in md


PARAMETRIZED_MODULE = """
import pytest
from ratchet_tck import JobCrudStoreContract, contract_test_classes
from ratchet_tck.memory import InMemoryStoreFixture
from tests.tck.broken_stores import CoreOnlyFixture

@pytest.fixture(params=["full", "core"])
def tck_fixture(request):
    return InMemoryStoreFixture() if request.param == "full" else CoreOnlyFixture()

globals().update(contract_test_classes((JobCrudStoreContract,)))
"""


def test_parametrized_fixture_gets_one_report_per_parameter(tmp_path: Path) -> None:
    module = tmp_path / "test_two_stores.py"
    module.write_text(PARAMETRIZED_MODULE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    out = tmp_path / "reports"
    code = pytest.main(
        [
            str(module),
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:django",
            "--rootdir",
            str(tmp_path),
            "-c",
            str(tmp_path / "pytest.ini"),
            "--ratchet-tck-report",
            str(out),
            "--ratchet-tck-name",
            "pair",
        ]
    )
    assert code == pytest.ExitCode.OK
    assert sorted(p.name for p in out.glob("*.json")) == ["pair-core.json", "pair-full.json"]
    full = json.loads((out / "pair-full.json").read_text())
    core = json.loads((out / "pair-core.json").read_text())
    assert full["name"] == "pair[full]" and "LockStore" in full["capabilities"]
    assert core["capabilities"] == []
    for data in (full, core):
        assert _contract(data, "JobCrudStoreContract")["status"] == "passed"
        assert data["verdict"] != VERDICT_COMPATIBLE, "the other required contracts did not run"
