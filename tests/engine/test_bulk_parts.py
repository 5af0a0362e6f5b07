"""A large ``enqueue_many`` goes to a ``StreamingBulkStore`` in parts (PostgreSQL writes one
part while the next is built): the same jobs as one bulk insert, in order, sealed under their
own ids, and still all or none when a job of a later part is refused. Run on every backend:
PostgreSQL streams, SQLite and MariaDB read the parts first, MongoDB has no such capability
(the engine's single ``bulk_insert``)."""

from __future__ import annotations

import base64
import contextlib
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from ratchet_api.errors import InvalidJobError, LimitExceededError
from ratchet_api.store.entities import JobQuery
from ratchet_api.store.protocols import JobQueryStore, JobStore, StreamingBulkStore
from ratchet_core.enqueue.pipeline import STREAM_PART
from tests.engine import targets
from tests.engine.conftest import build_container, migrate

COUNT = 2 * STREAM_PART + 201  # three parts, the last one short


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


@pytest.fixture
def made(store_url: str, request: pytest.FixtureRequest) -> Iterator[Any]:
    settings = getattr(request, "param", {})
    container = build_container(store_url, **settings)
    migrate(container.job_store())
    try:
        yield container
    finally:
        with contextlib.suppress(Exception):
            container.shutdown_resources()
        container.job_store().close()


def _ours(store: JobStore, marker: str) -> int:
    """How many jobs of ``targets.bulk_text`` this test wrote (databases outlive a test: the
    marker is in every one of its payloads)."""
    queries = store.capability(JobQueryStore)
    assert queries is not None
    query = JobQuery(target=f"{targets.__name__}:bulk_text", limit=10_000)
    return sum(marker in job.payload for job in queries.search_jobs(query))


@pytest.mark.parametrize(
    "made",
    [{}, {"encryption.keys": f"bulk-parts:{new_key()}"}],
    ids=["plain", "encrypted"],
    indirect=True,
)
def test_a_bulk_in_parts_stores_every_job_in_order(made: Any) -> None:
    scheduler, store = made.scheduler(), made.job_store()
    codec = made.payload_codec()
    ids = scheduler.enqueue_many(targets.bulk_item, [(n,) for n in range(COUNT)])
    assert len(ids) == COUNT and len(set(ids)) == COUNT
    assert ids == sorted(ids), "ids are drawn in order, part after part"
    for n in (0, STREAM_PART - 1, STREAM_PART, 2 * STREAM_PART, COUNT - 1):
        job = store.find_by_id(ids[n])
        assert job is not None, f"job {n} was not stored"
        assert codec.open_invocation(job).args == (n,), f"job {n} holds another item's arguments"
    streams = store.capability(StreamingBulkStore) is not None
    assert streams == (type(store).__module__.startswith("ratchet_store_sql")), (
        "the SQL store advertises StreamingBulkStore, the Mongo store does not"
    )


@pytest.mark.parametrize("made", [{"limits.max_payload_bytes": "2000"}], indirect=True)
def test_a_job_refused_in_a_later_part_leaves_nothing_written(made: Any) -> None:
    scheduler, store = made.scheduler(), made.job_store()
    marker = "".join(chr(ord("a") + int(c, 16)) for c in uuid.uuid4().hex[:16])
    items = [(f"{marker}-{n}",) for n in range(COUNT)]
    bad = 2 * STREAM_PART + 7  # in the third part: the first two were handed to the store
    items[bad] = (f"{marker}-{'x' * 3000}",)
    with pytest.raises(LimitExceededError, match=rf"item {bad}: .*limits\.max_payload_bytes"):
        scheduler.enqueue_many(targets.bulk_text, items)
    assert _ours(store, marker) == 0, "a refused bulk must write nothing"
    # the store and its pool are fine afterwards: the same bulk without the bad item goes in
    del items[bad]
    assert len(scheduler.enqueue_many(targets.bulk_text, items)) == COUNT - 1
    assert _ours(store, marker) == COUNT - 1


def test_an_argument_refused_in_a_later_part_is_named_and_nothing_is_written(
    made: Any,
) -> None:
    """Each part is resolved as it is built: a bad argument far into the bulk is found after
    earlier parts went to the store, is named by its position in the whole bulk, and leaves
    nothing written."""
    scheduler, store = made.scheduler(), made.job_store()
    marker = "".join(chr(ord("a") + int(c, 16)) for c in uuid.uuid4().hex[:16])
    items: list[tuple[Any, ...]] = [(f"{marker}-{n}",) for n in range(COUNT)]
    bad = STREAM_PART + 3  # in the second part
    items[bad] = (12345,)
    with pytest.raises(InvalidJobError, match=rf"^enqueue_many item {bad}: .*declared type str"):
        scheduler.enqueue_many(targets.bulk_text, items)
    assert _ours(store, marker) == 0, "a refused bulk must write nothing"
