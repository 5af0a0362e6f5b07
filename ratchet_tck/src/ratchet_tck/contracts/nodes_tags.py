"""NodeStore and TagStore contracts."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from ratchet_api.errors import JobNotFoundError
from ratchet_api.ids import uuid7
from ratchet_api.store.entities import MAX_TAG_LENGTH, NodeEntity
from ratchet_tck.contracts.base import StoreContract, assert_aware_utc, raises_store_data_error
from ratchet_tck.fixture import StoreFixture

_LONG_AGO = datetime(2000, 1, 1, tzinfo=UTC)


def _node(node_id: str, running: int = 0) -> NodeEntity:
    return NodeEntity(
        node_id=node_id,
        host="tck-host",
        pid=4242,
        started_at=_LONG_AGO,
        last_heartbeat=_LONG_AGO,
        running_jobs=running,
        tags=("tck-gpu",),
    )


class NodeStoreContract(StoreContract):
    """Heartbeats on the store's clock; inactive nodes found and deleted by timeout."""

    summary = "server clock, heartbeats, inactive detection and deletion"

    def test_server_now_is_aware_utc_and_sane(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        first = store.server_now()
        second = store.server_now()
        assert_aware_utc(first, "server_now()")
        assert second >= first
        assert abs(first - datetime.now(UTC)) < timedelta(minutes=1), "store clock is off"

    def test_heartbeat_uses_the_store_clock(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        before = store.server_now()
        store.upsert_heartbeat(_node("tck-node-1", running=2))
        (node,) = store.find_all_nodes()
        assert node.node_id == "tck-node-1"
        assert node.last_heartbeat >= before - timedelta(milliseconds=1)
        assert (node.host, node.pid, node.running_jobs) == ("tck-host", 4242, 2)

    def test_heartbeat_refreshes_one_node(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        store.upsert_heartbeat(_node("tck-node-1", running=1))
        first = store.find_all_nodes()[0].last_heartbeat
        time.sleep(0.02)
        store.upsert_heartbeat(_node("tck-node-1", running=5))
        nodes = store.find_all_nodes()
        assert len(nodes) == 1
        assert nodes[0].running_jobs == 5
        assert nodes[0].last_heartbeat > first

    def test_inactive_nodes_found_and_deleted(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        store.upsert_heartbeat(_node("tck-silent"))
        time.sleep(2.0)
        store.upsert_heartbeat(_node("tck-alive"))
        timeout = timedelta(milliseconds=1500)  # "tck-alive" stays younger over three calls
        assert [n.node_id for n in store.find_inactive_nodes(timeout)] == ["tck-silent"]
        assert store.find_inactive_nodes(timedelta(minutes=5)) == []
        assert store.delete_inactive_nodes(timeout) == 1
        assert [n.node_id for n in store.find_all_nodes()] == ["tck-alive"]

    def test_delete_nodes_by_ids(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        for name in ("tck-a", "tck-b", "tck-c"):
            store.upsert_heartbeat(_node(name))
        assert store.delete_nodes_by_ids(["tck-a", "tck-c", "tck-absent"]) == 2
        assert [n.node_id for n in store.find_all_nodes()] == ["tck-b"]
        assert store.delete_nodes_by_ids([]) == 0


class TagStoreContract(StoreContract):
    """Tags added without duplicates, listed sorted, refused when too long."""

    summary = "insert/dedupe/sort/delete tags, length limit, missing job"

    def test_insert_tags_adds_without_duplicates(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = self.insert(tck_fixture, tags=("tck-b",))
        store.insert_tags(job.id, ["tck-c", "tck-a", "tck-b", "tck-a"])
        assert store.find_tags(job.id) == ["tck-a", "tck-b", "tck-c"]
        assert sorted(self.reload(store, job).tags) == ["tck-a", "tck-b", "tck-c"]

    def test_tag_at_the_length_limit_is_accepted(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = self.insert(tck_fixture)
        longest = "t" * MAX_TAG_LENGTH
        store.insert_tags(job.id, [longest])
        assert longest in store.find_tags(job.id)

    def test_too_long_tag_is_refused_naming_the_field(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = self.insert(tck_fixture, tags=("tck-keep",))
        with raises_store_data_error("tag", "tags"):
            store.insert_tags(job.id, ["tck-new", "t" * (MAX_TAG_LENGTH + 1)])
        assert store.find_tags(job.id) == ["tck-keep"]

    def test_insert_tags_of_missing_job_raises_not_found(self, tck_fixture: StoreFixture) -> None:
        with pytest.raises(JobNotFoundError):
            tck_fixture.store().insert_tags(uuid7(), ["tck-x"])

    def test_delete_tags_by_job_id(self, tck_fixture: StoreFixture) -> None:
        store = tck_fixture.store()
        job = self.insert(tck_fixture, tags=("tck-a", "tck-b"))
        other = self.insert(tck_fixture, tags=("tck-a",))
        assert store.delete_tags_by_job_id(job.id) == 2
        assert store.find_tags(job.id) == []
        assert self.reload(store, job).tags == ()
        assert store.find_tags(other.id) == ["tck-a"]
        assert store.delete_tags_by_job_id(job.id) == 0
        assert store.find_tags(uuid7()) == []
