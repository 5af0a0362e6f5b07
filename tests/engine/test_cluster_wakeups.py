"""Cluster coordination: LISTEN/NOTIFY and Redis wake-ups between nodes, startup leases."""

from __future__ import annotations

import os
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from ratchet_api.model import JobPriority, JobStatus, JobWakeupHint, NodeIdentity, PollingConfig
from ratchet_core.cluster.coordination import (
    PostgresNotifyClusterCoordinator,
    RedisClusterCoordinator,
    StoreBackedStartupCoordinator,
    decode_hint,
    encode_hint,
)
from ratchet_core.runtime.config import DefaultRatchetConfig
from tests import servers
from tests.engine import targets
from tests.engine.conftest import build_container, migrate


class Inbox:
    def __init__(self) -> None:
        self.hints: list[JobWakeupHint] = []
        self.event = threading.Event()

    def __call__(self, hint: JobWakeupHint) -> None:
        self.hints.append(hint)
        self.event.set()

    def wait(self, timeout: float = 5.0) -> bool:
        ok = self.event.wait(timeout)
        self.event.clear()
        return ok


def test_hint_round_trips_and_garbage_is_ignored() -> None:
    text = encode_hint(JobPriority.HIGH, NodeIdentity(node_id="a"), "gpu")
    hint = decode_hint(text)
    assert hint == JobWakeupHint(
        priority=JobPriority.HIGH, source=NodeIdentity(node_id="a"), execution_target="gpu"
    )
    assert decode_hint("not json") is None
    assert decode_hint('{"p": 5}') is None


def exchange(make: Any) -> None:
    """Node b hears node a; a never hears itself."""
    a, b = make("node-a"), make("node-b")
    try:
        heard_by_a, heard_by_b = Inbox(), Inbox()
        a.register_wakeup_listener(heard_by_a)
        b.register_wakeup_listener(heard_by_b)
        assert a.wait_subscribed(5) and b.wait_subscribed(5)
        a.notify_new_work(JobPriority.CRITICAL, NodeIdentity(node_id="node-a"), "gpu")
        assert heard_by_b.wait()
        assert heard_by_b.hints[0].source.node_id == "node-a"
        assert heard_by_b.hints[0].priority is JobPriority.CRITICAL
        assert heard_by_b.hints[0].execution_target == "gpu"
        time.sleep(0.2)
        assert heard_by_a.hints == []  # own messages are suppressed
    finally:
        a.close()
        b.close()


def test_postgres_notify_wakes_other_nodes_only(postgres_url: str) -> None:
    exchange(lambda node: PostgresNotifyClusterCoordinator(postgres_url, node, "ratchet_test_a"))


def test_postgres_listener_reconnects_after_its_connection_is_killed(postgres_url: str) -> None:
    import psycopg

    from ratchet_core.cluster.coordination import libpq_url

    a = PostgresNotifyClusterCoordinator(postgres_url, "node-a", "ratchet_test_b")
    b = PostgresNotifyClusterCoordinator(postgres_url, "node-b", "ratchet_test_b")
    try:
        inbox = Inbox()
        b.register_wakeup_listener(inbox)
        assert b.wait_subscribed(5)
        with psycopg.connect(libpq_url(postgres_url), autocommit=True) as admin:
            killed = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE query LIKE 'LISTEN%ratchet_test_b%' AND pid <> pg_backend_pid()"
            ).fetchall()
        assert killed, "the listener connection was not found"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not inbox.hints:
            a.notify_new_work(JobPriority.NORMAL, NodeIdentity(node_id="node-a"), None)
            inbox.wait(0.3)
        assert inbox.hints, "no wake-up arrived after the listener reconnected"
    finally:
        a.close()
        b.close()


def _hears(postgres_url: str, listener: PostgresNotifyClusterCoordinator, channel: str) -> bool:
    """A hint published by another node on ``channel`` reaches ``listener``'s inbox."""
    other = PostgresNotifyClusterCoordinator(postgres_url, "node-other", channel)
    inbox = Inbox()
    listener.register_wakeup_listener(inbox)
    try:
        assert listener.wait_subscribed(5)
        other.notify_new_work(JobPriority.NORMAL, NodeIdentity(node_id="node-other"), None)
        return inbox.wait()
    finally:
        other.close()


def test_postgres_close_ends_the_listener_without_waiting_out_its_interval(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``close()`` wakes the listener thread through its local socket pair: even with a quiet
    interval far longer than ``close``'s 5 s join, the thread has ended when it returns (a
    worker's stop, and so ``ratchet worker --burst``, no longer waits out the interval)."""
    from ratchet_core.cluster import coordination

    monkeypatch.setattr(coordination, "LISTEN_WAKE_SECONDS", 60.0)
    b = PostgresNotifyClusterCoordinator(postgres_url, "node-b", "ratchet_test_c")
    try:
        assert _hears(postgres_url, b, "ratchet_test_c"), "a notification must still arrive"
        listener = b._subscriber
        assert listener is not None and listener.is_alive()
    finally:
        b.close()
    assert not listener.is_alive()


def test_postgres_listener_hears_with_a_descriptor_above_1023(postgres_url: str) -> None:
    """``select()`` refuses descriptors from 1024 on; the listener waits through the
    platform's selector, so a process with many files open still gets its wake-ups."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the hard limit on open files ({hard}) leaves no descriptor above 1023")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    b = PostgresNotifyClusterCoordinator(postgres_url, "node-b", "ratchet_test_d")
    try:
        assert _hears(postgres_url, b, "ratchet_test_d")
        assert b._listen_conn is not None and b._listen_conn.fileno() >= 1024
    finally:
        b.close()
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_postgres_listener_delivers_what_its_listen_statements_read(postgres_url: str) -> None:
    """A notification that arrives while the listener's own ``LISTEN`` statements run is read
    by psycopg with their results (the socket then has nothing more to read): it is delivered
    at once, not held until some later message."""

    class Backlogged(PostgresNotifyClusterCoordinator):
        def _connect(self) -> Any:
            conn = super()._connect()
            # this session's own NOTIFY comes back with its command's result
            conn.execute("LISTEN ratchet_test_e")
            hint = encode_hint(JobPriority.NORMAL, NodeIdentity(node_id="node-other"), None)
            conn.execute("SELECT pg_notify('ratchet_test_e', %s)", (hint,))
            return conn

    b = Backlogged(postgres_url, "node-b", "ratchet_test_e")
    inbox = Inbox()
    b.register_wakeup_listener(inbox)
    try:
        assert b.wait_subscribed(5)
        assert inbox.wait(), "the notification read with the LISTEN was not delivered"
    finally:
        b.close()


def test_a_forked_child_closing_its_copy_leaves_the_parents_listener_alone(
    postgres_url: str,
) -> None:
    """A child forked while the listener runs inherits the coordinator; its ``close()`` must
    not stop or disturb the parent's listener."""
    b = PostgresNotifyClusterCoordinator(postgres_url, "node-b", "ratchet_test_f")
    try:
        b.register_wakeup_listener(Inbox())
        assert b.wait_subscribed(5)
        pid = os.fork()
        if pid == 0:  # the child: close the inherited copy and leave at once
            try:
                b.close()
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert _hears(postgres_url, b, "ratchet_test_f")
        assert b._subscriber is not None and b._subscriber.is_alive()
    finally:
        b.close()


def test_redis_pubsub_wakes_other_nodes_only() -> None:
    if not servers.port_open("127.0.0.1", 6379):
        servers.unavailable("Redis", "nothing answers on 127.0.0.1:6379")
    exchange(
        lambda node: RedisClusterCoordinator("redis://127.0.0.1:6379/0", node, "ratchet_test_c")
    )


def test_backend_is_chosen_by_configuration(postgres_url: str) -> None:
    from ratchet_api.errors import ConfigurationError
    from ratchet_core.cluster.sqlite import SqliteFileClusterCoordinator
    from ratchet_core.defaults.cluster import NoOpClusterCoordinator
    from tests.engine.conftest import coordinator_for as build

    assert isinstance(build({"store.url": "sqlite://"}), NoOpClusterCoordinator)
    assert isinstance(build({}), SqliteFileClusterCoordinator)  # the default store.url's file
    pg = build({"cluster.backend": "postgres", "store.url": postgres_url})
    assert isinstance(pg, PostgresNotifyClusterCoordinator)
    pg.close()
    with pytest.raises(ConfigurationError, match=r"cluster\.url"):
        build({"cluster.backend": "postgres", "store.url": "sqlite:///x.db"})
    with pytest.raises(ConfigurationError, match=r"cluster\.url"):
        build({"cluster.backend": "redis"})
    with pytest.raises(ConfigurationError, match=r"cluster\.backend"):
        build({"cluster.backend": "zeromq"})


def test_enqueue_on_another_node_wakes_an_idle_worker_through_notify(
    postgres_url: str, make_worker: Any
) -> None:
    cluster = {"cluster.backend": "postgres", "cluster.channel": "ratchet_test_d"}
    worker_side = build_container(postgres_url, **cluster)
    migrate(worker_side.job_store())
    producer = build_container(postgres_url, **cluster)
    # An idle worker polling every 30 s: only the wake-up can start the job quickly.
    worker = make_worker(
        worker_side,
        polling=PollingConfig(
            min_interval=timedelta(seconds=30), max_interval=timedelta(seconds=30)
        ),
    )
    worker.start()
    assert worker_side.cluster_coordinator().wait_subscribed(5)
    time.sleep(0.3)  # let the first (empty) poll pass; the worker now sleeps 30 s
    job_id = producer.scheduler().enqueue(targets.add, 5, 6)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        job = producer.scheduler().get(job_id)
        if job.status is JobStatus.SUCCEEDED:
            break
        time.sleep(0.02)
    assert producer.scheduler().get(job_id).status is JobStatus.SUCCEEDED
    worker.stop(5)
    for container in (worker_side, producer):
        container.cluster_coordinator().close()
        container.job_store().close()


def test_startup_lease_is_held_by_one_node_at_a_time(sqlite_url: str) -> None:
    from ratchet_core.defaults.cluster import DefaultNodeIdentityProvider

    container = build_container(sqlite_url)
    store = container.job_store()
    migrate(store)

    def coordinator(node: str) -> StoreBackedStartupCoordinator:
        settings = DefaultRatchetConfig.from_dict({"node.id": node})
        return StoreBackedStartupCoordinator(store, DefaultNodeIdentityProvider(settings))

    first, second = coordinator("n1"), coordinator("n2")
    assert first.coordinated
    assert first.try_acquire("orphan-recovery", timedelta(seconds=30))
    assert not second.try_acquire("orphan-recovery", timedelta(seconds=30))
    first.release("orphan-recovery")
    assert second.try_acquire("orphan-recovery", timedelta(seconds=30))
    second.release("orphan-recovery")
    store.close()
