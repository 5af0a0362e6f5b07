"""Behaviour specific to the Mongo store (the TCK covers the shared contracts)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pymongo
import pytest

from ratchet_api.errors import (
    ConfigurationError,
    DuplicateJobError,
    StoreDataError,
    StoreError,
    TransientStoreError,
)
from ratchet_api.model import JobStatus
from ratchet_api.store.entities import Completion, JobEntity
from ratchet_api.store.protocols import LockStore
from ratchet_store_mongo import COLLECTIONS, MongoJobStore
from ratchet_store_mongo.documents import job_to_document
from ratchet_store_mongo.errors import translate
from ratchet_store_mongo.schema import HEAD

pytestmark = pytest.mark.mongo


def due_job(**changes: Any) -> JobEntity:
    now = datetime.now(UTC)
    job = JobEntity(target="app.jobs:work", scheduled_at=now - timedelta(seconds=1))
    return attrs.evolve(job, **changes) if changes else job


def raw_jobs(store: MongoJobStore) -> pymongo.collection.Collection[dict[str, object]]:
    return store.client.get_database(store.database_name)["ratchet_jobs"]


def test_datetimes_are_truncated_to_milliseconds_so_read_back_equals_written(
    mongo_store: MongoJobStore,
) -> None:
    at = datetime(2030, 1, 2, 3, 4, 5, 123987, tzinfo=UTC)
    job = due_job(scheduled_at=at, created_at=at, updated_at=at)
    stored = mongo_store.insert_job(job)
    expected = at.replace(microsecond=123000)
    assert stored.scheduled_at == expected
    found = mongo_store.find_by_id(job.id)
    assert found is not None
    assert found == stored
    assert found.scheduled_at == expected and found.scheduled_at.tzinfo is not None


def test_a_naive_datetime_argument_is_refused_naming_the_argument(
    mongo_store: MongoJobStore,
) -> None:
    with pytest.raises(StoreDataError, match="cutoff"):
        mongo_store.delete_dead_letter_older_than(datetime(2030, 1, 1), 10)


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("status", "EXPLODED", "'EXPLODED' is not a JobStatus"),
        ("attempt", "2", "expected int"),
        ("scheduled_at", "yesterday", "expected a BSON date"),
        ("tags", "urgent", "expected an array of strings"),
    ],
)
def test_a_corrupt_job_document_raises_store_data_error_naming_field_and_job(
    mongo_store: MongoJobStore, field: str, value: object, expected: str
) -> None:
    job = due_job()
    doc = job_to_document(job)
    doc[field] = value
    raw_jobs(mongo_store).insert_one(doc)
    with pytest.raises(StoreDataError, match=expected) as info:
        mongo_store.find_by_id(job.id)
    assert info.value.field == field
    assert info.value.job_id == job.id
    assert str(job.id) in str(info.value)


def test_a_job_document_missing_a_field_raises_store_data_error(
    mongo_store: MongoJobStore,
) -> None:
    job = due_job()
    doc = job_to_document(job)
    del doc["claim_seq"]
    raw_jobs(mongo_store).insert_one(doc)
    with pytest.raises(StoreDataError, match="missing") as info:
        mongo_store.find_by_id(job.id)
    assert info.value.field == "claim_seq" and info.value.job_id == job.id


def test_an_unreadable_job_is_dead_lettered_by_the_claim_not_handed_out(
    mongo_store: MongoJobStore,
) -> None:
    bad = due_job()
    doc = job_to_document(bad)
    doc["payload"] = 42
    raw_jobs(mongo_store).insert_one(doc)
    good = mongo_store.insert_job(due_job())
    claimed = mongo_store.claim_next_batch("node-a", 10)
    assert [j.id for j in claimed] == [good.id]
    stored = raw_jobs(mongo_store).find_one({"_id": bad.id})
    assert stored is not None and stored["status"] == "FAILED"
    assert "payload" in str(stored["last_error"])


def test_an_invalid_job_is_refused_before_anything_is_written(mongo_store: MongoJobStore) -> None:
    good = due_job()
    bad = attrs.evolve(due_job(), status="SOMEWHERE")  # type: ignore[arg-type]
    with pytest.raises(StoreDataError, match="status") as info:
        mongo_store.bulk_insert([good, bad])
    assert info.value.job_id == bad.id
    assert mongo_store.find_by_id(good.id) is None


def test_bulk_insert_with_a_duplicate_id_inserts_nothing(mongo_store: MongoJobStore) -> None:
    existing = mongo_store.insert_job(due_job())
    fresh = due_job()
    with pytest.raises(DuplicateJobError):
        mongo_store.bulk_insert([fresh, attrs.evolve(due_job(), id=existing.id)])
    assert mongo_store.find_by_id(fresh.id) is None


def test_bulk_insert_skips_taken_idempotency_keys_and_keys_repeated_in_the_batch(
    mongo_store: MongoJobStore,
) -> None:
    mongo_store.insert_job(due_job(idempotency_key="k1"))
    jobs = [
        due_job(idempotency_key="k1"),
        due_job(idempotency_key="k2"),
        due_job(idempotency_key="k2"),
        due_job(),
    ]
    assert mongo_store.bulk_insert(jobs) == 2
    assert mongo_store.find_by_id(jobs[1].id) is not None
    assert mongo_store.find_by_id(jobs[2].id) is None


def test_concurrent_inserts_with_one_idempotency_key_store_one_job(
    mongo_store: MongoJobStore,
) -> None:
    jobs = [due_job(idempotency_key="once") for _ in range(8)]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(mongo_store.insert_job, jobs))
    assert len({r.id for r in results}) == 1
    assert raw_jobs(mongo_store).count_documents({"idempotency_key": "once"}) == 1


def test_threads_claiming_together_get_each_job_exactly_once(mongo_store: MongoJobStore) -> None:
    mongo_store.bulk_insert([due_job() for _ in range(40)])
    start = threading.Barrier(6)

    def worker(n: int) -> list[JobEntity]:
        start.wait()
        got: list[JobEntity] = []
        while batch := mongo_store.claim_next_batch(f"node-{n}", 3):
            got.extend(batch)
        return got

    with ThreadPoolExecutor(6) as pool:
        claimed = [job for batch in pool.map(worker, range(6)) for job in batch]
    assert len(claimed) == 40
    assert len({j.id for j in claimed}) == 40
    assert all(j.claim_seq == 1 and j.attempt == 1 for j in claimed)
    assert all(j.started_at == j.heartbeat_at for j in claimed)


class _DropsAfter:
    """A jobs collection whose find_one_and_update fails, as a dropped connection does, from
    its ``n``-th call on; everything else goes to the real collection."""

    def __init__(self, real: pymongo.collection.Collection[dict[str, Any]], n: int) -> None:
        self._real, self._left = real, n

    def find_one_and_update(self, *args: Any, **kwargs: Any) -> Any:
        self._left -= 1
        if self._left <= 0:
            raise pymongo.errors.AutoReconnect("connection closed")
        return self._real.find_one_and_update(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _FlakyClaimStore(MongoJobStore):
    # A connection dropping in the middle of one claim cannot be produced on demand against
    # the real server, so the n-th find_one_and_update raises the driver's AutoReconnect.
    fail_at = 3

    @property
    def _jobs(self) -> Any:
        if not hasattr(self, "_flaky"):
            self._flaky = _DropsAfter(self._col("jobs"), self.fail_at)
        return self._flaky


def test_a_claim_failing_midway_returns_the_jobs_it_already_claimed(
    mongo_store: MongoJobStore, mongo_schema: str
) -> None:
    jobs = [due_job(scheduled_at=datetime.now(UTC) - timedelta(seconds=60 - i)) for i in range(5)]
    mongo_store.bulk_insert(jobs)
    flaky = _FlakyClaimStore(mongo_schema)
    try:
        claimed = flaky.claim_next_batch("node-a", 5)
        assert [j.id for j in claimed] == [jobs[0].id, jobs[1].id]
        with pytest.raises(TransientStoreError):  # nothing claimed before the failure
            flaky.claim_next_batch("node-a", 5)
    finally:
        flaky.close()
    running = {d["_id"] for d in raw_jobs(mongo_store).find({"status": "RUNNING"})}
    assert running == {jobs[0].id, jobs[1].id}
    rest = mongo_store.claim_next_batch("node-b", 5)
    assert [j.id for j in rest] == [j.id for j in jobs[2:]]


def test_mark_succeeded_many_reports_only_the_fenced_writes_that_applied(
    mongo_store: MongoJobStore,
) -> None:
    mongo_store.bulk_insert([due_job() for _ in range(3)])
    a, b, c = mongo_store.claim_next_batch("node-a", 3)
    applied = mongo_store.mark_succeeded_many(
        [
            Completion(job_id=a.id, claim_seq=a.claim_seq, result="1"),
            Completion(job_id=b.id, claim_seq=b.claim_seq + 1, result="stale"),
            Completion(job_id=c.id, claim_seq=c.claim_seq),
        ]
    )
    assert applied == {a.id, c.id}
    again = mongo_store.mark_succeeded_many([Completion(job_id=a.id, claim_seq=a.claim_seq)])
    assert again == set()
    found_b = mongo_store.find_by_id(b.id)
    assert found_b is not None and found_b.status is JobStatus.RUNNING


def test_joined_session_commits_and_aborts_with_the_callers_transaction(
    mongo_store: MongoJobStore,
) -> None:
    kept, dropped = due_job(), due_job()
    with mongo_store.client.start_session() as session:
        session.start_transaction()
        mongo_store.joined(session).insert_job(dropped)
        session.abort_transaction()
        session.with_transaction(lambda s: mongo_store.joined(s).insert_job(kept))
    assert mongo_store.find_by_id(dropped.id) is None
    assert mongo_store.find_by_id(kept.id) is not None


def test_locks_taken_inside_a_joined_session_survive_its_rollback(
    mongo_store: MongoJobStore,
) -> None:
    with mongo_store.client.start_session() as session:
        session.start_transaction()
        view = mongo_store.joined(session)
        locks = view.capability(LockStore)
        assert locks is not None
        assert locks.try_lock("leader", "n1", timedelta(seconds=30))
        session.abort_transaction()
    lock = mongo_store.find_lock("leader")
    assert lock is not None and lock.owner == "n1"


def test_joined_refuses_a_handle_that_is_not_a_session(mongo_store: MongoJobStore) -> None:
    with pytest.raises(StoreError, match="ClientSession"):
        mongo_store.joined(object())


def test_threads_racing_for_one_lock_see_exactly_one_winner(mongo_store: MongoJobStore) -> None:
    start = threading.Barrier(8)

    def attempt(n: int) -> bool:
        start.wait()
        return mongo_store.try_lock("race", f"owner-{n}", timedelta(seconds=30))

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(attempt, range(8)))
    assert results.count(True) == 1


def test_threads_racing_for_permits_never_exceed_the_limit(mongo_store: MongoJobStore) -> None:
    start = threading.Barrier(8)

    def attempt(n: int) -> bool:
        start.wait()
        return mongo_store.try_acquire_permit("gpu", f"h{n}", 3, timedelta(seconds=30))

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(attempt, range(8)))
    assert results.count(True) == 3
    assert mongo_store.count_permits("gpu") == 3


def test_payload_strings_that_look_like_field_paths_are_stored_literally(
    mongo_store: MongoJobStore,
) -> None:
    mongo_store.insert_job(due_job())
    (job,) = mongo_store.claim_next_batch("$owner", 1)
    assert mongo_store.mark_succeeded(job.id, job.claim_seq, "$status")
    found = mongo_store.find_by_id(job.id)
    assert found is not None and found.result == "$status"
    assert job.owner == "$owner"


def test_schema_upgrade_is_idempotent_and_downgrade_to_base_drops_the_collections(
    mongo_url: str,
) -> None:
    store = MongoJobStore(mongo_url, collection_prefix="schema_probe_")
    try:
        store.upgrade()
        store.upgrade()
        assert store.current_revision() == HEAD
        db = store.client.get_database(store.database_name)
        assert "claim" in db["schema_probe_jobs"].index_information()
        assert "idempotency_key" in db["schema_probe_jobs"].index_information()
        store.downgrade("base")
        assert store.current_revision() is None
        assert not [n for n in db.list_collection_names() if n.startswith("schema_probe_")]
    finally:
        store.downgrade("base")
        store.close()


def test_the_database_comes_from_the_url_path_or_defaults_to_ratchet() -> None:
    named = MongoJobStore("mongodb://127.0.0.1:27017/appdb?retryWrites=false")
    default = MongoJobStore("mongodb://127.0.0.1:27017/?retryWrites=false")
    try:
        assert named.database_name == "appdb"
        assert default.database_name == "ratchet"
    finally:
        named.close()
        default.close()


def test_an_application_client_with_default_codec_options_is_used_correctly(
    mongo_schema: str, mongo_store: MongoJobStore
) -> None:
    client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(mongo_schema)
    try:
        store = MongoJobStore(client, database=mongo_store.database_name)
        job = store.insert_job(due_job())
        assert mongo_store.find_by_id(job.id) == job
        store.close()
        assert client.admin.command("ping")["ok"] == 1  # the application's client stays open
    finally:
        client.close()


def test_a_url_that_is_not_mongodb_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="mongodb://"):
        MongoJobStore("postgresql://localhost/db")


def test_an_unreachable_server_is_a_transient_store_error() -> None:
    # a real refused connection: nothing listens on port 1
    store = MongoJobStore("mongodb://127.0.0.1:1/x", serverSelectionTimeoutMS=200)
    try:
        with pytest.raises(TransientStoreError) as info:
            store.find_by_id(due_job().id)
        assert info.value.retryable
    finally:
        store.close()


def test_the_store_imports_without_sqlalchemy() -> None:
    code = (
        "import sys; sys.modules['sqlalchemy'] = None; import ratchet_store_mongo; "
        "assert 'ratchet_core' not in sys.modules; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


@pytest.mark.parametrize(
    "error",
    [
        pymongo.errors.AutoReconnect("connection reset"),
        pymongo.errors.NotPrimaryError("not primary"),
        pymongo.errors.OperationFailure("stepped down", code=189),
        pymongo.errors.OperationFailure("write conflict", code=112),
        pymongo.errors.OperationFailure(
            "aborted", code=251, details={"errorLabels": ["TransientTransactionError"]}
        ),
        pymongo.errors.OperationFailure(
            "retry me", code=1, details={"errorLabels": ["RetryableWriteError"]}
        ),
    ],
    ids=["network", "not-primary", "stepdown", "write-conflict", "txn-label", "retry-label"],
)
def test_transient_driver_errors_become_retryable_store_errors(
    error: pymongo.errors.PyMongoError,
) -> None:
    # driver error values built directly: a primary stepdown cannot be caused on a one-node server
    translated = translate(error, "claim")
    assert isinstance(translated, TransientStoreError) and translated.retryable
    assert "claim" in str(translated)


def test_a_transaction_on_a_standalone_server_names_the_replica_set_requirement() -> None:
    error = pymongo.errors.OperationFailure(
        "Transaction numbers are only allowed on a replica set member or mongos", code=20
    )
    translated = translate(error, "archive_job")
    assert not translated.retryable and "replica set" in str(translated)


def test_an_enqueue_with_a_taken_idempotency_key_keeps_the_callers_transaction_usable(
    mongo_store: MongoJobStore,
) -> None:
    first = mongo_store.insert_job(due_job(idempotency_key="order-7"))
    other = due_job()
    with mongo_store.client.start_session() as session:

        def work(s: pymongo.client_session.ClientSession) -> JobEntity:
            view = mongo_store.joined(s)
            existing = view.insert_job(due_job(idempotency_key="order-7"))
            view.insert_job(other)
            return existing

        existing = session.with_transaction(work)
    assert existing.id == first.id
    assert mongo_store.find_by_id(other.id) is not None


def test_concurrent_upgrades_build_exactly_the_declared_collections_and_indexes(
    mongo_url: str,
) -> None:
    stores = [MongoJobStore(mongo_url, collection_prefix="race_probe_") for _ in range(4)]
    try:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda s: s.upgrade(), stores))
        db = stores[0].client.get_database(stores[0].database_name)
        names = {n for n in db.list_collection_names() if n.startswith("race_probe_")}
        assert names == {f"race_probe_{spec.name}" for spec in COLLECTIONS}
        for spec in COLLECTIONS:
            info = db[f"race_probe_{spec.name}"].index_information()
            for index in spec.indexes:
                declared = index.document
                assert declared["name"] in info, f"{spec.name}: index {declared['name']} missing"
                assert list(declared["key"].items()) == list(info[declared["name"]]["key"])
                assert bool(declared.get("unique")) == bool(info[declared["name"]].get("unique"))
    finally:
        stores[0].downgrade("base")
        for store in stores:
            store.close()


@pytest.mark.parametrize("scheme", ["mongodb", "mongodb+srv"])
def test_the_store_entry_point_of_each_mongo_scheme_is_mongo_job_store(scheme: str) -> None:
    from importlib.metadata import entry_points

    (entry,) = [e for e in entry_points(group="ratchet.stores") if e.name == scheme]
    assert entry.load() is MongoJobStore


def test_the_store_declares_which_of_its_errors_are_transient(mongo_store: MongoJobStore) -> None:
    job = mongo_store.insert_job(due_job())
    with pytest.raises(DuplicateJobError) as duplicate:
        mongo_store.insert_job(job)
    assert not mongo_store.is_transient(duplicate.value)
    assert not mongo_store.is_transient(ValueError("not a store error"))
    # a server that cannot be reached (a port held by a socket that never listens): pymongo's
    # own error and the store's translation of it are both transient
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
        client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(
            f"mongodb://127.0.0.1:{port}", serverSelectionTimeoutMS=50
        )
        try:
            with pytest.raises(pymongo.errors.ServerSelectionTimeoutError) as unreachable:
                client.admin.command("ping")
        finally:
            client.close()
    assert mongo_store.is_transient(unreachable.value)
    translated = translate(unreachable.value, "ping")
    assert isinstance(translated, TransientStoreError) and mongo_store.is_transient(translated)


def test_a_listing_with_a_preview_loads_arguments_and_results_cut_by_the_server(
    mongo_store: MongoJobStore,
) -> None:
    from ratchet_api.store.entities import JobQuery

    wide = due_job(payload="y" * 50_000, tags=frozenset({"preview"}))
    done = due_job(payload="[]", tags=frozenset({"preview"}))
    mongo_store.insert_job(wide)
    mongo_store.insert_job(done)
    raw_jobs(mongo_store).update_one({"_id": done.id}, {"$set": {"result": "r" * 50_000}})

    listed = {j.id: j for j in mongo_store.search_jobs(JobQuery(tag="preview", preview=100))}

    # at most preview + 1 characters of each: a longer value is recognisable as cut
    assert listed[wide.id].payload == "y" * 101 and listed[wide.id].result is None
    assert listed[done.id].payload == "[]" and listed[done.id].result == "r" * 101
    whole = mongo_store.find_by_id(done.id)
    assert whole is not None and len(whole.result or "") == 50_000
