"""Key rotation reaches archived jobs (``SealedArchiveStore``) on every store: jobs encrypted
under an old key run, are archived, then ``rotate`` re-seals their archived values (payload,
result, last error, state, the branch condition of an archived child) under the new key; the
raw archived rows carry only the new key id, and with the old key removed the archived jobs'
detail, state and condition still open."""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

from ratchet_api.ids import uuid7
from ratchet_api.model import JobStatus
from ratchet_api.store.protocols import ArchiveStore, JobExtensionStore, SealedArchiveStore
from ratchet_api.workflow import Step, predicate
from ratchet_core.payload.codec import SealingStateStore
from ratchet_core.payload.envelope import key_id_of
from ratchet_core.payload.rotation import ARCHIVED, covers_archive, key_status, rotate
from ratchet_store_sql import SqlJobStore
from tests.engine import composition_targets as t
from tests.engine import secret_targets
from tests.engine.conftest import build_container, migrate
from tests.engine.test_key_rotation import ratchet

C = TypeVar("C")
ARCHIVED_COLUMNS = ("payload", "result", "last_error", "signal_payload")


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def container_with(store_url: str, keys: str, current: str) -> Any:
    container = build_container(
        store_url, **{"encryption.keys": keys, "encryption.current_key_id": current}
    )
    migrate(container.job_store())
    return container


def raw_archived(store: Any, job_id: UUID) -> dict[str, str]:
    """The sealed texts of one archived job as stored: its columns, its state per namespace
    (``state:<ns>``) and the condition that released it (``condition``), read behind the
    store's back."""
    found: dict[str, str] = {}
    if hasattr(store, "engine"):
        import sqlalchemy as sa

        from ratchet_store_sql import schema

        a, wc = schema.archived_jobs, schema.workflow_conditions
        with store.engine.connect() as conn:
            row = conn.execute(sa.select(a).where(a.c.id == job_id)).mappings().one()
            condition = conn.execute(
                sa.select(wc.c.expression).where(wc.c.child_job_id == job_id)
            ).scalar_one_or_none()
        for column in ARCHIVED_COLUMNS:
            if row[column] is not None:
                found[column] = row[column]
        for namespace, entry in json.loads(row["state"]).items():
            found[f"state:{namespace}"] = entry["json"]
    else:
        doc = store._col("archive").find_one({"_id": job_id})
        assert doc is not None, f"{job_id} is not archived"
        for column in ARCHIVED_COLUMNS:
            if isinstance(doc.get(column), str):
                found[column] = doc[column]
        for entry in doc.get("state") or []:
            found[f"state:{entry['ns']}"] = entry["json"]
        cond = store._col("conditions").find_one({"child_job_id": job_id})
        condition = None if cond is None else cond.get("expression")
    if condition is not None:
        found["condition"] = condition
    return found


def test_rotation_reseals_archived_jobs_and_their_detail_still_opens(
    store_url: str, make_worker: Any
) -> None:
    run = uuid.uuid4().hex[:8]
    old_id, new_id = f"old-{run}", f"new-{run}"  # the databases outlive the test: own key ids
    k1, k2 = f"{old_id}:{new_key()}", f"{new_id}:{new_key()}"
    marker = f"arch-{run}"
    first_id = uuid7()  # earlier tests' jobs are not ours

    before = container_with(store_url, k1, old_id)
    scheduler = before.scheduler()
    kept = scheduler.enqueue(secret_targets.keep_secret, marker, {"user": "u"})
    failed = scheduler.job(secret_targets.fail_with_secret).args(marker).max_retries(0).enqueue()
    branched = scheduler.job(t.make).args(marker)
    branched.branch(
        predicate(t.token_is, f"{marker}-result"),
        if_true=Step(t.side, "yes"),
        if_false=Step(t.side, "no"),
    )
    branched.enqueue()
    root, yes, no = branched.job_ids
    expected = {
        kept: JobStatus.SUCCEEDED,
        failed: JobStatus.FAILED,
        root: JobStatus.SUCCEEDED,
        yes: JobStatus.SUCCEEDED,
        no: JobStatus.CANCELLED,
    }
    make_worker(before).run_until_idle(60)
    store = before.job_store()
    assert {j: getattr(store.find_by_id(j), "status", None) for j in expected} == expected

    archive = store.capability(ArchiveStore)
    assert archive is not None
    for job_id in expected:
        assert archive.archive_job(job_id), job_id
    old_rows = {job_id: raw_archived(store, job_id) for job_id in expected}
    keys = {(j, name): key_id_of(text) for j, row in old_rows.items() for name, text in row.items()}
    # the only plaintext: the engine's own "branch not taken" error of the cancelled child
    assert {at for at, key_id in keys.items() if key_id is None} == {(no, "last_error")}
    assert set(keys.values()) == {old_id, None}
    assert "state:progress" in old_rows[kept] and "last_error" in old_rows[failed]
    assert "condition" in old_rows[yes] and "condition" in old_rows[no]
    assert old_id in key_status(store)  # archived values are counted (live ones are gone)

    during = container_with(store_url, f"{k1},{k2}", new_id)
    report = rotate(during.job_store(), during.payload_codec(), batch_size=2, after=first_id)
    assert report.archive_covered is True
    mine = [f for f in report.archived.failures if f[0] in expected]
    assert not mine, mine
    written = sum(key_id is not None for key_id in keys.values())
    assert report.archived.rewritten >= written
    assert report.last_archived_job_id is not None

    for job_id in expected:
        row = raw_archived(store, job_id)
        assert row.keys() == old_rows[job_id].keys()
        for name, text in row.items():
            if keys[job_id, name] is None:
                assert text == old_rows[job_id][name]  # plaintext is left as it is
            else:
                assert key_id_of(text) == new_id, (job_id, name, text)
    status = key_status(during.job_store())
    assert old_id not in status, status
    assert status[new_id][ARCHIVED] >= written
    again = rotate(during.job_store(), during.payload_codec(), after=first_id)
    assert again.archived.rewritten == 0  # already current: nothing to do

    after = container_with(store_url, k2, new_id)  # the old key is gone
    reader = after.scheduler()
    found = after.job_store().capability(ArchiveStore)
    assert found is not None
    jobs = {job_id: found.find_archived_job(job_id) for job_id in expected}
    details = {j: reader.details.detail(job) for j, job in jobs.items() if job is not None}
    assert details.keys() == expected.keys()
    assert all(d.unreadable is None for d in details.values()), details
    assert details[kept].args == (marker, {"user": "u"})
    assert details[kept].result == {"token": f"{marker}-result", "user": "u"}
    assert f"{marker}-error" in (details[failed].error or "")
    assert details[root].result == {"token": f"{marker}-result"}
    ext = after.job_store().capability(JobExtensionStore)
    assert ext is not None
    state = SealingStateStore(ext, after.payload_codec()).get_state(kept, "progress")
    assert state is not None and json.loads(state.json) == {"seen": f"{marker}-state"}
    codec = after.payload_codec()
    for child in (yes, no):
        assert "token_is" in codec.open_condition(raw_archived(store, child)["condition"], child)


class LiveOnlySqlStore(SqlJobStore):
    """A store with ``SealedValueStore`` but without ``SealedArchiveStore`` (a third-party
    store written before it): the real SQL store with that one capability not advertised."""

    def capability(self, kind: Callable[..., C]) -> C | None:
        return None if kind is SealedArchiveStore else super().capability(kind)


def archived_jobs(container: Any, make_worker: Any, marker: str, count: int) -> list[UUID]:
    """``count`` echo jobs run and archived."""
    ids = [
        container.scheduler().enqueue(secret_targets.echo_secret, f"{marker}-{i}")
        for i in range(count)
    ]
    make_worker(container).run_until_idle(30)
    archive = container.job_store().capability(ArchiveStore)
    assert archive is not None
    for job_id in ids:
        assert archive.archive_job(job_id), job_id
    return ids


def test_a_store_without_the_capability_reports_the_archive_not_covered(
    tmp_path: Path, make_worker: Any
) -> None:
    url = f"sqlite:///{tmp_path / 'live-only.db'}"
    k1, k2 = f"k1:{new_key()}", f"k2:{new_key()}"
    ids = archived_jobs(container_with(url, k1, "k1"), make_worker, "live-only", 2)
    during = container_with(url, f"{k1},{k2}", "k2")
    store = LiveOnlySqlStore(url)
    try:
        assert not covers_archive(store)
        report = rotate(store, during.payload_codec())
        assert report.archive_covered is False and report.archived.scanned == 0
        assert all(ARCHIVED not in counts for counts in key_status(store).values())
        full = during.job_store()
        assert covers_archive(full) and key_status(full)["k1"][ARCHIVED] == 2 * len(ids)
    finally:
        store.close()


def test_keys_cli_counts_rotates_and_resumes_in_the_archive(
    tmp_path: Path, make_worker: Any
) -> None:
    url = f"sqlite:///{tmp_path / 'archive-cli.db'}"
    k1, k2 = f"k1:{new_key()}", f"k2:{new_key()}"
    ids = archived_jobs(container_with(url, k1, "k1"), make_worker, "cli", 4)
    live = container_with(url, k1, "k1").scheduler().enqueue(secret_targets.echo_secret, "live")
    keys = f"{k1},{k2}"

    status = ratchet("keys", "status", "--json", "--url", url, keys=keys, current="k2")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout) == {
        "current_key_id": "k2",
        "archive_covered": True,
        "keys": {"k1": {"payload": 1, ARCHIVED: 8}},  # payload and result of 4 archived jobs
    }
    # one live batch, then one batch of 2 archived jobs: stopped inside the archive
    first = ratchet(
        "keys", "rotate", "--batch-size", "2", "--max-batches", "2", "--url", url,
        keys=keys, current="k2",
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert "archived jobs: 4 values scanned, 4 re-encrypted" in first.stdout
    assert f"batch 2: up to archived job {sorted(ids)[1]}" in first.stdout
    last = first.stdout.strip().splitlines()[-1]
    assert last == f"last archived job id: {sorted(ids)[1]}"
    halfway = json.loads(
        ratchet("keys", "status", "--json", "--url", url, keys=keys, current="k2").stdout
    )
    assert halfway["keys"] == {"k1": {ARCHIVED: 4}, "k2": {"payload": 1, ARCHIVED: 4}}

    resumed = ratchet(
        "keys", "rotate", "--after-archived", last.rsplit(" ", 1)[1], "--url", url,
        keys=keys, current="k2",
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert "rotated to key k2: 0 values scanned" in resumed.stdout  # the live jobs are skipped
    assert "archived jobs: 4 values scanned, 4 re-encrypted" in resumed.stdout
    table = ratchet("keys", "status", "--url", url, keys=keys, current="k2")
    assert table.returncode == 0, table.stderr
    assert ARCHIVED in table.stdout and "k1" not in table.stdout

    after = container_with(url, k2, "k2")  # k1 is gone
    archive = after.job_store().capability(ArchiveStore)
    assert archive is not None
    for index, job_id in enumerate(ids):
        job = archive.find_archived_job(job_id)
        assert job is not None
        assert after.scheduler().details.detail(job).result == f"cli-{index}-result"
    assert after.scheduler().get(live) is not None
