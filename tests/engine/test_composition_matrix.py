"""Every job kind composed with encryption, on every store, with real workers.

One case per store and encryption mode (off; on: one key, ``encryption.mode`` auto; rotated: on,
then ``rotate`` to a second key while every job is still pending), masking on in all of them.
Each case enqueues one job of every kind the enqueue pipeline serves (``enqueue``,
``schedule``, ``enqueue_many``, the builder, ``enqueue_in`` in the caller's transaction, a
batch with a callback, a streaming batch with a callback, workflows with ``then``,
``on_success``, ``on_failure``, ``branch`` on a predicate with a secret argument and on
``equals`` of a secret value, ``await_signal`` with a secret signal payload, a recurring
definition fired by the sweeper and by ``trigger_now``, and a prepared invocation through the
``InvocationSubmissionService``), runs a worker until every job reached its expected terminal
status, and then looks for the secret marker in the stored data: the raw rows or documents of
every table or collection, and on SQLite also the database file's bytes. With encryption off
the marker must be there (the check can fail); with it on it must not.
"""

from __future__ import annotations

import base64
import contextlib
import os
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest

from ratchet_api.ids import uuid7
from ratchet_api.model import JobStatus
from ratchet_api.store.entities import JobQuery
from ratchet_api.store.protocols import BatchStore
from ratchet_api.workflow import Step, equals, predicate
from ratchet_core.features.recurring.runner import start_recurring
from ratchet_core.payload.envelope import key_id_of
from ratchet_core.payload.rotation import key_status, rotate
from tests.engine import composition_targets as t
from tests.engine.conftest import build_container, migrate
from tests.engine.raw_rows import dump, read_column
from tests.engine.worker_fixtures import wait_for

S = JobStatus.SUCCEEDED
MODES = ["off", "on", "rotated"]


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


@contextlib.contextmanager
def transaction(store: Any) -> Iterator[Any]:
    """An open transaction of the caller's own (a SQLAlchemy connection or a Mongo session),
    committed on leaving."""
    if hasattr(store, "engine"):
        with store.engine.connect() as conn, conn.begin():
            yield conn
        return
    with store.client.start_session() as session:
        session.start_transaction()
        yield session
        session.commit_transaction()


def callback_ids(store: Any, batch_id: UUID) -> list[UUID]:
    """The callback jobs of a batch (listed in its parent job's payload)."""
    import json

    batches = store.capability(BatchStore)
    batch = batches.find_batch(batch_id)
    assert batch is not None and batch.parent_job_id is not None
    parent = store.find_by_id(batch.parent_job_id)
    listed = json.loads(parent.payload)
    return [UUID(i) for kind in ("on_success", "on_failure", "on_complete") for i in listed[kind]]


@pytest.mark.parametrize("mode", MODES)
def test_every_job_kind_reaches_its_outcome_and_keeps_its_secret(
    store_url: str, mode: str, start_workers: Any
) -> None:
    run = uuid.uuid4().hex[:8]
    old_id, new_id = f"old-{run}", f"new-{run}"  # the databases outlive the test: own key ids
    k1, k2 = f"{old_id}:{new_key()}", f"{new_id}:{new_key()}"
    settings: dict[str, Any] = {"security.mask_payloads": "true", "recurring.enabled": "false"}
    if mode != "off":
        settings["encryption.keys"] = k1
    container = build_container(store_url, **settings)
    store = container.job_store()
    migrate(store)
    scheduler = container.scheduler()
    # letters only: the error sanitizer masks what looks like a key or a card number
    marker = "S3CR3T" + "".join(chr(ord("a") + int(c, 16)) for c in uuid.uuid4().hex[:20])
    first_id = uuid7()  # the databases outlive the test: earlier cases' jobs are not ours
    expected: dict[UUID, JobStatus] = {}

    def expect(job_id: UUID, status: JobStatus = S) -> None:
        expected[job_id] = status

    # single jobs
    expect(scheduler.enqueue(t.make, marker))
    expect(scheduler.schedule(timedelta(0), t.make, marker))
    for job_id in scheduler.enqueue_many(t.make, [(marker,), (marker,)]):
        expect(job_id)
    expect(scheduler.job(t.make).args(marker).tags(f"run-{run}").enqueue())
    with transaction(store) as tx:
        in_tx = scheduler.enqueue_in(tx, t.make, marker)
    expect(in_tx)
    invocation = container.job_invocation_resolver().resolve(t.make, [marker], {})
    expect(container.invocation_submission_service().enqueue_invocation(invocation).enqueue())

    # batches
    batch_id = (
        scheduler.batch(f"batch-{run}")
        .add_many(t.make, [(marker,), (marker,)])
        .on_success(t.side, "batch-done")
        .enqueue()
    )
    streamed_id = (
        scheduler.streaming_batch(f"stream-{run}", range(3), lambda _n: (t.make, marker))
        .on_success(t.side, "stream-done")
        .enqueue()
    )
    for callback in callback_ids(store, batch_id) + callback_ids(store, streamed_id):
        expect(callback)

    # workflows
    chain = scheduler.job(t.make).args(marker).then(t.step, marker=marker)
    chain.on_success(t.side, "chain-done").enqueue()
    for job_id in chain.job_ids:
        expect(job_id)
    failing = scheduler.job(t.fail).args(marker).max_retries(0)
    failing.on_failure(t.handled, marker=marker).on_success(t.side, "never").enqueue()
    root, on_failure, on_success = failing.job_ids
    expect(root, JobStatus.FAILED)
    expect(on_failure)
    expect(on_success, JobStatus.CANCELLED)
    for condition in (
        predicate(t.token_is, f"{marker}-result"),
        equals({"token": f"{marker}-result"}),
    ):
        branched = scheduler.job(t.make).args(marker)
        branched.branch(condition, if_true=Step(t.side, "yes"), if_false=Step(t.side, "no"))
        branched.enqueue()
        root, yes, no = branched.job_ids
        expect(root)
        expect(yes)
        expect(no, JobStatus.CANCELLED)
    waiting = scheduler.job(t.signalled).kwargs(marker=marker).await_signal(f"sig-{run}")
    expect(waiting.enqueue())
    decision = scheduler.signal(f"sig-{run}", {"pin": f"{marker}-signal"})
    assert decision.outcome.value == "DELIVERED", decision

    # recurring: a firing of the sweeper and a manual trigger
    name = f"rec-{run}"
    definition = scheduler.recurring(name, timedelta(seconds=1), t.make, marker)
    sweeper = start_recurring(store, container.settings(), scheduler)
    assert sweeper is None  # recurring.enabled is off: the test drives one directly
    from ratchet_core.features.recurring.settings import RecurringSettings
    from ratchet_core.features.recurring.sweeper import RecurringSweeper

    sweeper = RecurringSweeper(
        store, RecurringSettings.from_config(container.settings()), pipeline=scheduler.pipeline
    )
    assert sweeper.fire(definition, definition.next_fire_at).fired == 1
    fired = [j.id for j in scheduler.search(JobQuery(tag=f"recurring:{name}"))]
    assert len(fired) == 1
    expect(scheduler.recurring_jobs.trigger_now(name))
    for job_id in fired:
        expect(job_id)

    worker_container = container
    if mode == "rotated":
        worker_container = build_container(
            store_url,
            **{**settings, "encryption.keys": f"{k1},{k2}", "encryption.current_key_id": new_id},
        )
        report = rotate(
            worker_container.job_store(), worker_container.payload_codec(), after=first_id
        )
        assert not report.failures, report.failures
        assert report.rewritten > len(expected)
        for job_id in expected:
            assert key_id_of(read_column(store, job_id, "payload")) == new_id
        assert key_id_of(read_column(store, waiting.job_ids[0], "signal_payload")) == new_id
        assert report.templates_rewritten == 1
        status = key_status(worker_container.job_store())
        assert old_id not in status, status  # every surface moved: conditions, templates too

    start_workers(worker_container, 1)

    def statuses() -> dict[UUID, JobStatus | None]:
        return {job_id: getattr(store.find_by_id(job_id), "status", None) for job_id in expected}

    def done() -> bool:
        return statuses() == expected

    try:
        wait_for(done, 90, "every job at its expected status")
    except AssertionError:
        wrong = {k: (v, expected[k]) for k, v in statuses().items() if v is not expected[k]}
        raise AssertionError(
            f"jobs not at their expected status (got, expected): {wrong}"
        ) from None
    reader = worker_container.scheduler()
    assert reader.result(chain.job_ids[0]).value == {"token": f"{marker}-result"}
    assert f"{marker}-error" in (reader.result(failing.job_ids[0]).error or "")

    raw = dump(store)
    if mode == "off":
        assert marker in raw  # the check below can fail: plaintext is found when it is there
    else:
        at = raw.find(marker)
        assert at < 0, f"the secret is stored in clear: ...{raw[max(0, at - 200) : at + 60]!r}"
    assert scheduler.recurring_jobs.delete(name)  # later cases rotate every definition


def test_ratchet_enqueue_goes_through_the_pipeline_and_is_sealed(
    sqlite_url: str, make_worker: Any
) -> None:
    """``ratchet enqueue`` (a subprocess of the installed script, as a user runs it) builds its
    job with the builder, so with keys set its payload is sealed under the job's id and the
    job runs; the secret argument is not in the database file."""
    import subprocess
    import sys
    from pathlib import Path

    key = f"cli-{uuid.uuid4().hex[:8]}:{new_key()}"
    container = build_container(sqlite_url, **{"encryption.keys": key})
    store = container.job_store()
    migrate(store)
    marker = "S3CR3T" + "".join(chr(ord("a") + int(c, 16)) for c in uuid.uuid4().hex[:20])
    repo = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": str(repo),
        "RATCHET_SECURITY_ALLOWED_PACKAGES": "tests.",
        "RATCHET_ENCRYPTION_KEYS": key,
    }
    env.pop("RATCHET_STORE_URL", None)
    script = Path(sys.executable).with_name("ratchet")
    done = subprocess.run(
        [str(script), "enqueue", "tests.engine.composition_targets:make", marker, "--url",
         sqlite_url],
        capture_output=True, text=True, cwd=repo, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job_id = UUID(done.stdout.strip())
    assert key_id_of(read_column(store, job_id, "payload")) == key.split(":", maxsplit=1)[0]
    make_worker(container).run_until_idle(30)
    assert container.scheduler().result(job_id).value == {"token": f"{marker}-result"}
    assert marker not in dump(store)
