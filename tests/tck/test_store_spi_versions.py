"""The store SPI version checks (``ratchet_api.store.versions``, ``ratchet_core.runtime.store_compat``):
a store of another major version is refused naming both versions and the migration guide; a
store of an older minor version is accepted, adapted, with the disabled features named in the
log and in ``ratchet health``; the adapter's fallbacks keep the 1.0 guarantees on the real
frozen 1.0 store (plain sqlite3)."""

from __future__ import annotations

import inspect
import json
import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest

from ratchet_api.errors import StoreDataError, StoreSpiVersionError, UnsupportedCapabilityError
from ratchet_api.model import JobPriority, JobStatus
from ratchet_api.store.entities import (
    ChildSettlement,
    JobEntity,
    NodeEntity,
    RecurringAdvance,
    RecurringJobEntity,
)
from ratchet_api.store.protocols import (
    MANDATORY,
    ArchiveStore,
    JobStore,
    RecurringJobStore,
    WorkflowConditionStore,
)
from ratchet_api.store.versions import (
    MIGRATION_GUIDE,
    SPI_1_0,
    SPI_CHANGES,
    STORE_SPI,
    SpiVersion,
    changes_since,
    declared_spi_version,
    parse_spi_version,
)
from ratchet_core.observability.health import check_health
from ratchet_core.runtime.store_compat import (
    SpiCompatStore,
    adapt_store,
    check_store_spi,
    named_priority,
    spi_status,
)
from ratchet_core.runtime.stores import open_store
from ratchet_tck.fixture import SAMPLE_TARGET, now_ms
from ratchet_tck.memory import InMemoryJobStore
from tests.tck.v1_support import V1_STORE, import_v1_store

import_v1_store()
from ratchet_v1_sqlite import V1SqliteStore  # noqa: E402


class _Declaring(InMemoryJobStore):
    """The reference store declaring another version (its methods are today's)."""

    def __init__(self, version: object) -> None:
        super().__init__()
        self.ratchet_store_spi = version
        self.closed = False

    def close(self) -> None:
        self.closed = True
        super().close()


@pytest.fixture
def v1(tmp_path: Path) -> Iterator[V1SqliteStore]:
    store = V1SqliteStore(str(tmp_path / "v1.db"))
    yield store
    store.close()


@pytest.fixture
def adapted(v1: V1SqliteStore) -> JobStore:
    return adapt_store(v1)  # type: ignore[arg-type]  # a 1.0 store is not today's JobStore


def _job(**changes: Any) -> JobEntity:
    now = now_ms()
    job = JobEntity(target=SAMPLE_TARGET, scheduled_at=now - timedelta(seconds=1), created_at=now)
    return attrs.evolve(job, **changes)


# ---------------------------------------------------------------- declarations


def test_a_store_without_a_declaration_implements_1_0() -> None:
    class Undeclared:
        pass

    assert declared_spi_version(Undeclared()) == SPI_1_0
    assert declared_spi_version(InMemoryJobStore()) == STORE_SPI


@pytest.mark.parametrize(
    ("value", "expected"),
    [((1, 1), SpiVersion(1, 1)), ([2, 0], SpiVersion(2, 0)), ("1.0", SPI_1_0)],
)
def test_versions_parse_from_pairs_and_text(value: object, expected: SpiVersion) -> None:
    assert parse_spi_version(value) == expected


@pytest.mark.parametrize("value", [(1,), (True, 0), (1, -1), "one.two", "1", 1.1, (1, 1, 0)])
def test_a_malformed_declaration_is_refused_naming_the_store(value: object) -> None:
    with pytest.raises(StoreSpiVersionError, match=r"_Declaring\.ratchet_store_spi is malformed"):
        check_store_spi(_Declaring(value))


# ---------------------------------------------------------------- major / minor checks


def test_a_newer_major_version_is_refused_naming_both_versions_and_the_guide() -> None:
    with pytest.raises(StoreSpiVersionError) as caught:
        adapt_store(_Declaring((2, 0)))
    message = str(caught.value)
    assert "implements store SPI 2.0" in message
    assert f"this Ratchet implements store SPI {STORE_SPI}" in message
    assert "upgrade Ratchet" in message and MIGRATION_GUIDE in message
    assert caught.value.store_version == SpiVersion(2, 0)
    assert caught.value.supported == STORE_SPI


def test_an_older_major_version_is_refused_too() -> None:
    with pytest.raises(StoreSpiVersionError, match=r"store SPI 0\.9.*move the store to"):
        check_store_spi(_Declaring((0, 9)))


def test_open_store_refuses_another_major_and_closes_the_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opened: list[_Declaring] = []

    def open_v2(url: str) -> _Declaring:
        opened.append(_Declaring((2, 0)))
        return opened[-1]

    import ratchet_core.runtime.stores as stores

    class _EntryPoint:
        value = "tests:open_v2"

        def load(self) -> Any:
            return open_v2

    monkeypatch.setattr(stores, "store_entry_points", lambda: {"vtwo": _EntryPoint()})
    with pytest.raises(StoreSpiVersionError, match=r"store SPI 2\.0"):
        open_store("vtwo:///x")
    assert opened and opened[0].closed


def test_the_current_and_a_newer_minor_version_run_unchanged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    current = InMemoryJobStore()
    assert adapt_store(current) is current
    newer = _Declaring((STORE_SPI.major, STORE_SPI.minor + 1))
    with caplog.at_level(logging.INFO, logger="ratchet_core.runtime.store_compat"):
        assert adapt_store(newer) is newer
    assert "newer than this Ratchet's" in caplog.text


def test_an_older_minor_version_is_adapted_with_the_disabled_features_named(
    v1: V1SqliteStore, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="ratchet_core.runtime.store_compat"):
        store = adapt_store(v1)  # type: ignore[arg-type]
    assert isinstance(store, SpiCompatStore) and store.inner is v1
    assert isinstance(store, JobStore)  # the engine sees today's protocol
    status = spi_status(store)
    assert (status.declared, status.engine, status.adapted) == (SPI_1_0, STORE_SPI, True)
    members = " ".join(d.member for d in status.disabled)
    for method in (
        "mark_dispatched",
        "reset_orphan_jobs",
        "release_claim",
        "settle_children",
        "claim_next_batch",
        "flow_control",
    ):
        assert method in members
    lost = " ".join(d.lost for d in status.disabled)
    assert "workflow steps" in lost and "integer priorities" in lost
    # the log names the versions, every disabled feature and the guide, once
    warning = caplog.records[-1].getMessage()
    assert "V1SqliteStore implements store SPI 1.0 (this Ratchet: 1.1)" in warning
    assert "workflow steps" in warning and MIGRATION_GUIDE in warning
    assert adapt_store(store) is store  # adapting twice changes nothing


def test_ratchet_health_names_the_disabled_features(adapted: JobStore) -> None:
    report = check_health(adapted, node_timeout=timedelta(seconds=30))
    spi = next(c for c in report.checks if c.name == "spi")
    assert spi.ok  # an older minor version runs: the check informs, it does not fail
    assert "store SPI 1.0 (this Ratchet: 1.1)" in spi.detail
    assert "settle_children" in spi.detail and "workflow steps" in spi.detail
    current = check_health(InMemoryJobStore(), node_timeout=timedelta(seconds=30))
    assert "(current)" in next(c for c in current.checks if c.name == "spi").detail


def test_every_change_of_a_version_names_what_an_older_store_loses() -> None:
    assert changes_since(STORE_SPI) == ()
    assert changes_since(SPI_1_0) == tuple(c for c in SPI_CHANGES if c.version > SPI_1_0)
    for change in SPI_CHANGES:
        assert change.change and change.fallback and change.lost, change.member


# ---------------------------------------------------------------- the 1.0 fallbacks


def test_priorities_reach_a_1_0_store_as_the_nearest_named_point(adapted: JobStore) -> None:
    assert [named_priority(p) for p in (-100, -26, -25, 24, 25, 74, 75, 100)] == [
        JobPriority.LOW,
        JobPriority.LOW,
        JobPriority.NORMAL,
        JobPriority.NORMAL,
        JobPriority.HIGH,
        JobPriority.HIGH,
        JobPriority.CRITICAL,
        JobPriority.CRITICAL,
    ]
    jobs = {p: adapted.insert_job(_job(priority=p)) for p in (-80, 10, 42, 99)}
    assert {p: j.priority for p, j in jobs.items()} == {
        -80: JobPriority.LOW,
        10: JobPriority.NORMAL,
        42: JobPriority.HIGH,
        99: JobPriority.CRITICAL,
    }
    adapted.bulk_insert([_job(priority=60)])
    claimed = adapted.claim_next_batch("node", 10)
    assert [j.priority for j in claimed] == [100, 50, 50, 0, -50]  # the order is kept


def test_mark_dispatched_reports_only_current_claims(adapted: JobStore) -> None:
    for _ in range(3):
        adapted.insert_job(_job())
    a, b, c = adapted.claim_next_batch("node", 3)
    assert adapted.cancel_job(b.id)
    assert adapted.release_claim(c.id, c.claim_seq)
    claims = {a.id: a.claim_seq, b.id: b.claim_seq, c.id: c.claim_seq}
    assert adapted.mark_dispatched(claims) == {a.id}
    # a 1.0 claim counts as started: recovery sees every stale claim as dispatched
    stale = adapted.find_stale_running_jobs(adapted.server_now() + timedelta(seconds=1), 10)
    assert [(j.id, j.dispatched_at) for j in stale] == [(a.id, a.started_at)]


def test_reset_orphan_jobs_spares_nodes_that_heartbeat_since_the_cutoff(
    adapted: JobStore,
) -> None:
    for _ in range(2):
        adapted.insert_job(_job())
    dead = adapted.claim_next_batch("dead-node", 1)[0]
    back = adapted.claim_next_batch("back-node", 1)[0]
    adapted.upsert_heartbeat(NodeEntity(node_id="dead-node"))
    (last_seen,) = [n.last_heartbeat for n in adapted.find_all_nodes()]
    cutoff = adapted.server_now()
    while cutoff <= last_seen:  # the store's clock must move past the dead node's heartbeat
        cutoff = adapted.server_now()
    adapted.upsert_heartbeat(NodeEntity(node_id="back-node"))  # heartbeat again after the cutoff
    assert adapted.reset_orphan_jobs(["dead-node", "back-node"], cutoff) == 1
    recovered = adapted.find_by_id(dead.id)
    assert recovered is not None
    # 1.0 recovery charges the attempt and supersedes the old claim
    assert (recovered.status, recovered.owner, recovered.attempt) == (JobStatus.PENDING, None, 1)
    assert adapted.mark_succeeded(dead.id, dead.claim_seq, None) is False
    kept = adapted.find_by_id(back.id)
    assert kept is not None and kept.owner == "back-node"
    with pytest.raises(StoreDataError, match="heartbeat_before"):
        adapted.reset_orphan_jobs(["dead-node"], datetime.now())  # naive on purpose
    assert adapted.reset_orphan_jobs(["back-node"], cutoff) == 0


def test_release_claim_with_run_at_reschedules_with_the_attempt_counted(
    adapted: JobStore,
) -> None:
    adapted.insert_job(_job(last_error="earlier failure"))
    job = adapted.claim_next_batch("node", 1)[0]
    later = adapted.server_now() + timedelta(hours=1)
    assert adapted.release_claim(job.id, job.claim_seq - 1, run_at=later) is False  # fenced
    assert adapted.release_claim(job.id, job.claim_seq, run_at=later) is True
    back = adapted.find_by_id(job.id)
    assert back is not None
    assert (back.status, back.attempt, back.owner) == (JobStatus.PENDING, 1, None)
    assert abs(back.scheduled_at - later) < timedelta(milliseconds=1)
    assert back.last_error == "earlier failure"
    assert adapted.claim_next_batch("node", 1) == []  # due only later
    with pytest.raises(StoreDataError, match="run_at"):
        adapted.release_claim(job.id, job.claim_seq, run_at=datetime.now())  # naive on purpose


def test_release_unless_dispatched_is_refused_and_a_plain_release_gives_back(
    adapted: JobStore,
) -> None:
    adapted.insert_job(_job())
    job = adapted.claim_next_batch("node", 1)[0]
    assert adapted.release_claim(job.id, job.claim_seq, unless_dispatched=True) is False
    running = adapted.find_by_id(job.id)
    assert running is not None and running.status is JobStatus.RUNNING
    assert adapted.release_claim(job.id, job.claim_seq) is True
    released = adapted.find_by_id(job.id)
    assert released is not None and (released.status, released.attempt) == (JobStatus.PENDING, 0)


def test_workflow_steps_are_not_offered_by_a_1_0_store(adapted: JobStore) -> None:
    assert adapted.capability(WorkflowConditionStore) is None
    with pytest.raises(UnsupportedCapabilityError, match="settle_children"):
        adapted.settle_children(
            _job().id, [ChildSettlement(child_id=_job().id, status=JobStatus.PENDING)]
        )


def test_joined_views_keep_the_adapter(adapted: JobStore) -> None:
    from ratchet_api.errors import StoreError

    with pytest.raises(StoreError, match="cannot join"):
        adapted.joined(object())  # the 1.0 store joins nothing; the error is its own


class _V1WithCapabilities(V1SqliteStore):
    """A 1.0 store advertising two 1.0-shaped capabilities: ``RecurringJobStore`` without
    ``advance_next_fire_many`` and ``ArchiveStore`` without ``delete_archived_before`` and
    ``statuses`` (definitions kept in memory: only the adapter's probing and the recurring
    fallback are under test)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._recurring: dict[str, RecurringJobEntity] = {}
        self._guard = threading.Lock()

    def save_recurring(self, recurring: RecurringJobEntity) -> RecurringJobEntity:
        self._recurring[recurring.name] = recurring
        return recurring

    def find_recurring(self, name: str) -> RecurringJobEntity | None:
        return self._recurring.get(name)

    def list_recurring(self) -> list[RecurringJobEntity]:
        return sorted(self._recurring.values(), key=lambda r: r.name)

    def find_due_recurring(self, limit: int) -> list[RecurringJobEntity]:
        return []

    def advance_next_fire(
        self, name: str, expected_fire_at: datetime, next_fire_at: datetime
    ) -> bool:
        with self._guard:
            found = self._recurring.get(name)
            if found is None or found.next_fire_at != expected_fire_at:
                return False
            self._recurring[name] = attrs.evolve(
                found, next_fire_at=next_fire_at, last_fired_at=expected_fire_at
            )
            return True

    def delete_recurring(self, name: str) -> bool:
        return self._recurring.pop(name, None) is not None

    def archive_job(self, job_id: Any) -> bool:
        return False

    def archive_finished_before(self, cutoff: datetime, limit: int) -> int:
        return 0

    def find_archived_job(self, job_id: Any) -> JobEntity | None:
        return None

    def find_archived_jobs(self, limit: int, offset: int = 0) -> list[JobEntity]:
        return []


def test_grown_capabilities_are_adapted_or_hidden_and_named(tmp_path: Path) -> None:
    inner = _V1WithCapabilities(str(tmp_path / "caps.db"))
    try:
        assert inner.capability(ArchiveStore) is None  # 1.0-shaped: not today's protocol
        store = adapt_store(inner)  # type: ignore[arg-type]
        status = spi_status(store)
        recurring = store.capability(RecurringJobStore)
        assert recurring is not None  # one advance_next_fire per definition
        first = datetime(2030, 1, 1, tzinfo=UTC)
        for name in ("b", "a"):
            recurring.save_recurring(
                RecurringJobEntity(name=name, cron="* * * * *", next_fire_at=first, priority=42)
            )
        assert inner.find_recurring("a") is not None
        assert inner.find_recurring("a").priority is JobPriority.HIGH  # type: ignore[union-attr]
        advances = [
            RecurringAdvance(name=n, expected_fire_at=first, next_fire_at=first + timedelta(1))
            for n in ("a", "b")
        ]
        assert recurring.advance_next_fire_many(advances) == {"a", "b"}
        assert recurring.advance_next_fire_many(advances) == set()  # each CAS already won
        assert "RecurringJobStore" not in " ".join(d.member for d in status.disabled)
    finally:
        inner.close()


def test_a_1_0_shaped_capability_the_engine_cannot_use_is_hidden(tmp_path: Path) -> None:
    class V1Archive(_V1WithCapabilities):
        def capability(self, kind: Any) -> Any:
            # advertises its 1.0 ArchiveStore, as 1.0's usual implementation did when the
            # protocol had only these methods
            return self if kind in (ArchiveStore, RecurringJobStore) else None

    inner = V1Archive(str(tmp_path / "archive.db"))
    try:
        store = adapt_store(inner)  # type: ignore[arg-type]
        assert store.capability(ArchiveStore) is None
        hidden = next(d for d in spi_status(store).disabled if "ArchiveStore" in d.member)
        assert "delete_archived_before" in hidden.member and "archive_finished_before" in (
            hidden.member
        )
        assert hidden.lost.startswith("retention")
    finally:
        inner.close()


# ---------------------------------------------------------------- guards for later changes


def _mandatory_methods() -> dict[str, list[str]]:
    """Today's mandatory methods in the format of ``v1_store/spi_1_0_methods.json``."""
    found: dict[str, list[str]] = {}
    for protocol in (*MANDATORY, JobStore):
        for name, method in inspect.getmembers(protocol, inspect.isfunction):
            if name.startswith("_"):
                continue
            owner = next(c for c in protocol.__mro__ if name in c.__dict__).__name__
            found[f"{owner}.{name}"] = [
                p.name
                + ("=" if p.default is not inspect.Parameter.empty else "")
                + ("*" if p.kind is inspect.Parameter.KEYWORD_ONLY else "")
                for p in inspect.signature(method).parameters.values()
                if p.name != "self"
            ]
    return found


def test_every_change_of_the_mandatory_protocols_since_1_0_is_a_declared_spi_change() -> None:
    """A method added to or changed in the mandatory protocols must come with a version (an
    entry of ``SPI_CHANGES``, a fallback in ``store_compat``); removing one is a new major
    version, which this release does not have."""
    frozen = json.loads((V1_STORE / "spi_1_0_methods.json").read_text())["methods"]
    today = _mandatory_methods()
    assert set(frozen) <= set(today), f"removed since 1.0: {set(frozen) - set(today)}"
    changed = {name for name, params in today.items() if frozen.get(name) != params}
    declared = {c.member for c in SPI_CHANGES}
    assert changed <= declared, f"SPI changes without a version: {changed - declared}"
    assert changed  # the 1.1 changes themselves are seen


def test_the_adapter_gives_the_engine_every_mandatory_method_of_today() -> None:
    """The worker calls the current SPI on an adapted store: each method must be the
    adapter's own (with today's parameters), not a pass-through to an older store."""
    for qualified, params in _mandatory_methods().items():
        name = qualified.split(".", 1)[1]
        assert name in vars(SpiCompatStore), f"SpiCompatStore lacks {qualified}"
        mine = [
            p.name
            + ("=" if p.default is not inspect.Parameter.empty else "")
            + ("*" if p.kind is inspect.Parameter.KEYWORD_ONLY else "")
            for p in inspect.signature(vars(SpiCompatStore)[name]).parameters.values()
            if p.name != "self"
        ]
        assert mine == params, f"SpiCompatStore.{name}{mine} differs from {qualified}{params}"


def test_the_adapter_is_reported_under_the_store_s_class_name(adapted: JobStore) -> None:
    # the worker labels its store metrics with type(store).__name__
    assert type(adapted).__name__ == "V1SqliteStore"
    assert isinstance(adapted, SpiCompatStore) and "store SPI 1.0 adapter" in repr(adapted)
