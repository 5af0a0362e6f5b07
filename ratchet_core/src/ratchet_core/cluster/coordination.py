"""Cluster coordination: startup leases and wake-ups between nodes.

* :class:`StoreBackedStartupCoordinator` takes leases through the store's ``LockStore``
  capability so that destructive work (orphan recovery) runs on one node at a time.
* :func:`ratchet_core.cluster.backend.create_cluster_coordinator` picks the wake-up transport
  from ``cluster.backend``: ``auto`` (the default: the store's native mechanism, PostgreSQL
  LISTEN/NOTIFY when ``store.url`` is PostgreSQL, a watch of the database file when it is a
  SQLite file, else polling only), ``none``, ``postgres``, ``redis`` (pub/sub) or ``sqlite``.
  Wake-ups are an optimisation: a lost one only delays work until the next poll.

On PostgreSQL the database itself announces new jobs: migration 0011 installs a trigger that
NOTIFYs :data:`DATABASE_CHANNEL` when an insert commits, so any enqueuing process wakes the
workers whatever its own settings; the Python publisher is then used only for the scheduler's
other wake-ups (a retried or resumed job).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import selectors
import socket
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from ratchet_api.model import JobPriority, JobWakeupHint, NodeIdentity, as_priority
from ratchet_api.spi.runtime import (
    NodeIdentityProvider,
    RatchetConfigKey,
)
from ratchet_api.store.protocols import JobStore, LockStore
from ratchet_core.runtime.config import (
    parse_duration,
    parse_optional_str,
    parse_str,
    register_key,
)

_log = logging.getLogger("ratchet.cluster")

_BACKENDS = ("auto", "none", "postgres", "redis", "sqlite")

DATABASE_CHANNEL = "ratchet_wakeup"
"""The channel on which the PostgreSQL insert trigger (migration 0011) notifies."""
DATABASE_SOURCE = "database"
"""The source node id of the trigger's wake-up messages."""


def _parse_backend(raw: str) -> str:
    value = raw.strip().lower()
    if value in {"postgresql", "pg"}:
        value = "postgres"
    if value not in _BACKENDS:
        raise ValueError(f"expected one of {', '.join(_BACKENDS)}, got {raw!r}")
    return value


CLUSTER_BACKEND = register_key(
    RatchetConfigKey(
        "cluster.backend",
        _parse_backend,
        "auto",
        "Wake-up transport between nodes: auto (PostgreSQL LISTEN/NOTIFY when store.url is "
        "PostgreSQL, where the database itself notifies inserted jobs; a watch of the database "
        "file when store.url is a SQLite file; otherwise polling only), none (polling only), "
        "postgres (LISTEN/NOTIFY), redis (pub/sub) or sqlite (the file watch).",
    )
)
CLUSTER_URL = register_key(
    RatchetConfigKey(
        "cluster.url",
        parse_optional_str,
        None,
        "URL of the wake-up transport (postgres: defaults to store.url, and must be a direct "
        "one when store.url goes through a transaction pooler (ratchet_pooler=transaction), "
        "without which workers only poll; redis: required, for example "
        "redis://127.0.0.1:6379/0).",
    )
)
CLUSTER_SQLITE_CHECK_INTERVAL = register_key(
    RatchetConfigKey(
        "cluster.sqlite_check_interval",
        parse_duration,
        timedelta(milliseconds=10),
        "How often a worker on a SQLite file (cluster.backend auto or sqlite) checks whether "
        "another process inserted jobs (PRAGMA data_version, which reads no table) where the "
        "operating system reports no file writes (not Linux); on Linux checks come at most "
        "every half of it while the file is being written. Shorter costs more CPU.",
    )
)
CLUSTER_CHANNEL = register_key(
    RatchetConfigKey(
        "cluster.channel",
        parse_str,
        "ratchet_wakeup",
        "Channel name of the LISTEN/NOTIFY or pub/sub wake-ups.",
    )
)

WakeupListener = Callable[[JobWakeupHint], None]


# ---------------------------------------------------------------- startup leases


class StoreBackedStartupCoordinator:
    """``StartupCoordinator`` over the store's ``LockStore`` capability.

    Lease names are ``ratchet.startup.<action>`` owned by this node's id. A store without the
    capability cannot coordinate: every node acquires (the protected work must be idempotent,
    which orphan recovery is, since every write it makes is fenced); this is logged once.
    """

    LOCK_PREFIX = "ratchet.startup."

    def __init__(self, store: JobStore, node_identity: NodeIdentityProvider) -> None:
        self._locks = store.capability(LockStore)
        self._node_id = node_identity.get_node_id()
        self._warned = False

    @property
    def coordinated(self) -> bool:
        """True when leases are real (the store has ``LockStore``)."""
        return self._locks is not None

    def try_acquire(self, action_name: str, lease_ttl: timedelta) -> bool:
        if self._locks is None:
            if not self._warned:
                self._warned = True
                _log.info(
                    "store has no LockStore capability: startup action %r runs on every node "
                    "without a lease",
                    action_name,
                )
            return True
        return self._locks.try_lock(self.LOCK_PREFIX + action_name, self._node_id, lease_ttl)

    def release(self, action_name: str) -> None:
        if self._locks is not None:
            self._locks.unlock(self.LOCK_PREFIX + action_name, self._node_id)


# ---------------------------------------------------------------- wake-up messages


def encode_hint(priority: int, source: NodeIdentity, execution_target: str | None) -> str:
    """The wake-up message (compact JSON, well under PostgreSQL's 8000-byte NOTIFY limit)."""
    return json.dumps(
        {"n": source.node_id, "p": int(priority), "t": execution_target}, separators=(",", ":")
    )


def decode_hint(text: str) -> JobWakeupHint | None:
    """Parse a wake-up message; None (logged) for anything malformed."""
    try:
        data = json.loads(text)
        return JobWakeupHint(
            priority=as_priority(int(data.get("p", JobPriority.NORMAL))),
            source=NodeIdentity(node_id=str(data["n"])),
            execution_target=data.get("t"),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        _log.debug("ignoring malformed wake-up message %r", text)
        return None


LISTEN_WAKE_SECONDS = 0.2
"""How long a listener thread waits for a message before it looks whether it was closed: what
``close()`` waits at most for it where the wait cannot be interrupted (Redis's ``get_message``;
a wait on the server's socket cannot be cut short from another thread through the connection
itself without a round trip to the server, which an outage would stall). PostgreSQL's listener
waits on its socket and on a local socket pair that ``close()`` writes to, so it ends at once."""


class _ListenerThreadCoordinator:
    """Shared machinery: listener registry, self-suppression, a coalescing publisher thread
    and a reconnecting subscriber thread. Subclasses provide the transport."""

    name = "cluster"

    def __init__(self, node_id: str, channel: str) -> None:
        self.node_id = node_id
        self.channel = channel
        self._listeners: list[WakeupListener] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._pending: str | None = None
        self._publish_wanted = threading.Event()
        self._publisher: threading.Thread | None = None
        self._subscriber: threading.Thread | None = None
        self._subscribed = threading.Event()
        self.published = 0
        self.received = 0

    # -- public API

    def notify_new_work(
        self, priority: int, source: NodeIdentity, execution_target: str | None
    ) -> None:
        if self._closed.is_set():
            return
        # Coalesce: bursts of enqueues produce one message per publisher round trip.
        with self._lock:
            self._pending = encode_hint(priority, source, execution_target)
            if self._publisher is None:
                self._publisher = threading.Thread(
                    target=self._publish_loop, name=f"ratchet-{self.name}-publisher", daemon=True
                )
                self._publisher.start()
        self._publish_wanted.set()

    def register_wakeup_listener(self, listener: WakeupListener) -> None:
        with self._lock:
            self._listeners.append(listener)
            if self._subscriber is None and not self._closed.is_set():
                self._subscriber = threading.Thread(
                    target=self._subscribe_loop, name=f"ratchet-{self.name}-listener", daemon=True
                )
                self._subscriber.start()

    def wait_subscribed(self, timeout: float) -> bool:
        """Block until the subscriber is listening (tests and benchmarks)."""
        return self._subscribed.wait(timeout)

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._publish_wanted.set()
        self._interrupt()
        for thread in (self._publisher, self._subscriber):
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout=5)
        self._close_transport()

    # -- transport hooks

    def _publish(self, message: str) -> None:
        raise NotImplementedError

    def _listen(self, deliver: Callable[[str], None]) -> None:
        """Subscribe and call ``deliver`` per message until closed; raise on transport failure."""
        raise NotImplementedError

    def _interrupt(self) -> None:
        """Unblock ``_listen`` after close (best effort)."""

    def _close_transport(self) -> None:
        """Close publisher resources."""

    # -- loops

    def _publish_loop(self) -> None:
        while not self._closed.is_set():
            self._publish_wanted.wait()
            self._publish_wanted.clear()
            with self._lock:
                message, self._pending = self._pending, None
            if message is None or self._closed.is_set():
                continue
            try:
                self._publish(message)
                self.published += 1
            except Exception:  # noqa: BLE001 - wake-ups are best effort; polling finds the work
                _log.warning(
                    "%s wake-up publish failed; polling still finds the work",
                    self.name,
                    exc_info=True,
                )
                self._reset_publisher()
                self._closed.wait(0.2)

    def _reset_publisher(self) -> None:
        """Drop a broken publisher connection (reconnect on next publish)."""

    def _deliver(self, message: str) -> None:
        hint = decode_hint(message)
        if hint is None or hint.source.node_id == self.node_id:
            return  # our own enqueue already woke our poller locally
        self.received += 1
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(hint)
            except Exception:  # noqa: BLE001 - a listener must not kill the subscriber
                _log.exception("wake-up listener %r failed", listener)

    def _subscribe_loop(self) -> None:
        delay = 0.1
        while not self._closed.is_set():
            try:
                self._listen(self._deliver)
                delay = 0.1
            except Exception:  # noqa: BLE001 - reconnect on any transport failure
                self._subscribed.clear()
                if self._closed.is_set():
                    return
                _log.warning(
                    "%s wake-up listener lost its connection; reconnecting in %.1fs",
                    self.name,
                    delay,
                    exc_info=True,
                )
                self._closed.wait(delay)
                delay = min(delay * 2, 5.0)


def libpq_url(url: str) -> str:
    """A SQLAlchemy PostgreSQL URL (``postgresql+psycopg://...``) as a libpq URL."""
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme.startswith(("postgresql", "postgres")):
        raise ValueError(f"not a PostgreSQL URL: {url!r}")
    return "postgresql://" + rest


class PostgresNotifyClusterCoordinator(_ListenerThreadCoordinator):
    """Wake-ups through PostgreSQL ``LISTEN``/``NOTIFY`` on ``channel``.

    Publishing uses one autocommit connection (``SELECT pg_notify(...)``); listening uses a
    second connection owned by a daemon thread that reconnects with backoff when the server
    goes away. Messages published by this node are ignored (its own poller is woken locally).
    """

    name = "postgres"

    def __init__(
        self,
        url: str,
        node_id: str,
        channel: str = DATABASE_CHANNEL,
        *,
        database_notifies_inserts: bool = False,
    ) -> None:
        super().__init__(node_id, channel)
        self.url = libpq_url(url)
        self.database_notifies_inserts = database_notifies_inserts
        """True when ``url`` is the store's own database, whose insert trigger announces new
        jobs: the scheduler then publishes nothing for an enqueue."""
        self._pub_conn: Any = None
        self._listen_conn: Any = None
        self._stop: tuple[int, socket.socket] | None = None
        """(process id, the socket ``close()`` writes to) of the listening session: the
        listener waits on the other end of the pair too."""

    def _connect(self) -> Any:
        import psycopg

        return psycopg.connect(self.url, autocommit=True, connect_timeout=5)

    def _publish(self, message: str) -> None:
        if self._pub_conn is None or self._pub_conn.closed:
            self._pub_conn = self._connect()
        self._pub_conn.execute("SELECT pg_notify(%s, %s)", (self.channel, message))

    def _reset_publisher(self) -> None:
        conn, self._pub_conn = self._pub_conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - already broken
                _log.debug("closing broken publisher connection failed", exc_info=True)

    def _listen(self, deliver: Callable[[str], None]) -> None:
        from psycopg import sql

        # A pair per listening session and process: a forked child (no listener thread)
        # that closes its inherited coordinator must not write to the parent's pair.
        stop_send, stop_receive = socket.socketpair()
        self._stop = (os.getpid(), stop_send)
        waiting = selectors.DefaultSelector()  # select() fails on descriptors >= 1024
        conn: Any = None
        try:
            conn = self._connect()
            self._listen_conn = conn
            for channel in dict.fromkeys((DATABASE_CHANNEL, self.channel)):
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            self._subscribed.set()
            waiting.register(conn.fileno(), selectors.EVENT_READ)
            waiting.register(stop_receive, selectors.EVENT_READ)
            ready = True  # first hand over what the LISTENs read (psycopg keeps it)
            while not self._closed.is_set():
                if ready:
                    # what the connection holds now, without waiting further
                    for notify in conn.notifies(timeout=0):
                        deliver(notify.payload)
                        if self._closed.is_set():
                            return
                ready = False
                for key, _ in waiting.select(LISTEN_WAKE_SECONDS):
                    if key.fileobj is stop_receive:
                        stop_receive.recv(64)  # close() (the loop ends) or a stray byte
                    else:
                        ready = True
        finally:
            self._stop = None
            waiting.close()
            stop_send.close()
            stop_receive.close()
            self._listen_conn = None
            try:
                if conn is not None:
                    conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                _log.debug("closing listener connection failed", exc_info=True)

    def _interrupt(self) -> None:
        stop = self._stop
        if stop is not None and stop[0] == os.getpid():
            with contextlib.suppress(OSError):  # the session ended meanwhile
                stop[1].send(b"x")

    def _close_transport(self) -> None:
        self._reset_publisher()


class RedisClusterCoordinator(_ListenerThreadCoordinator):
    """Wake-ups through Redis pub/sub on ``channel`` (needs the ``redis`` package:
    ``pip install ratchet-core[redis]``)."""

    name = "redis"

    def __init__(self, url: str, node_id: str, channel: str = "ratchet_wakeup") -> None:
        super().__init__(node_id, channel)
        try:
            import redis
        except ImportError as exc:
            from ratchet_api.errors import ConfigurationError

            raise ConfigurationError(
                "cluster.backend",
                "redis needs the redis package: pip install 'ratchet-core[redis]'",
            ) from exc
        self.url = url
        self._client: Any = redis.Redis.from_url(url, socket_connect_timeout=5)

    def _publish(self, message: str) -> None:
        self._client.publish(self.channel, message)

    def _listen(self, deliver: Callable[[str], None]) -> None:
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.subscribe(self.channel)
            self._subscribed.set()
            while not self._closed.is_set():
                message = pubsub.get_message(timeout=LISTEN_WAKE_SECONDS)
                if message is None:
                    continue
                data = message.get("data")
                if isinstance(data, bytes):
                    data = data.decode("utf-8", "replace")
                if isinstance(data, str):
                    deliver(data)
        finally:
            try:
                pubsub.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                _log.debug("closing redis pubsub failed", exc_info=True)

    def _close_transport(self) -> None:
        try:
            self._client.close()
        except Exception:  # noqa: BLE001 - closing a broken connection
            _log.debug("closing redis client failed", exc_info=True)


def sqlite_database(url: str | None) -> str | None:
    """The absolute, symlink-free path of the file a SQLite URL names (read by SQLAlchemy's
    own URL parser, which a SQL store brings); None for anything else, in-memory databases
    (no other process sees them) and ``file:`` URIs included."""
    if not url or not url.startswith("sqlite"):
        return None
    try:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError
    except ImportError:  # no SQL store installed: nothing opens this URL
        return None
    try:
        parsed = make_url(url)
    except ArgumentError:  # not a URL
        return None
    return _sqlite_file(parsed)


def store_database(store: object) -> str | None:
    """The file of a SQL store on SQLite (its engine's URL, as SQLAlchemy opened it), else
    None: a store replaced by an alternative is asked, not ``store.url``."""
    return _sqlite_file(getattr(getattr(store, "engine", None), "url", None))


def _sqlite_file(url: Any) -> str | None:
    """The file of a SQLAlchemy URL object on SQLite, else None (also for an object that is
    not such a URL: a store of another kind may have an ``engine`` of its own)."""
    backend = getattr(url, "get_backend_name", None)
    if backend is None or backend() != "sqlite":
        return None
    database = str(url.database or "")
    if database in ("", ":memory:") or database.startswith("file:"):
        return None
    if str(url.query.get("uri", "")).lower() == "true":
        return None
    return os.path.realpath(database)


def _native_postgres(url: str | None) -> bool:
    """A PostgreSQL URL whose driver for LISTEN (psycopg 3) is installed."""
    if not url:
        return False
    try:
        libpq_url(url)
    except ValueError:
        return False
    import importlib.util

    return importlib.util.find_spec("psycopg") is not None


POOLER_OPTION = "ratchet_pooler"
"""The store URL option naming a connection pooler in front of PostgreSQL (``SqlJobStore``'s)."""


def _query_of(url: str) -> dict[str, list[str]]:
    from urllib.parse import parse_qs, urlsplit

    try:
        return parse_qs(urlsplit(url).query)
    except ValueError:  # not a URL: nothing to read
        return {}


def behind_transaction_pooler(url: str | None) -> bool:
    """True when ``url`` says it goes through a transaction-pooling PgBouncer
    (``?ratchet_pooler=transaction``): a connection to it cannot keep a ``LISTEN``."""
    if not url:
        return False
    values = _query_of(url).get(POOLER_OPTION, [])
    return bool(values) and values[-1].strip().lower() == "transaction"


def _database_name(url: str) -> str:
    from urllib.parse import urlsplit

    try:
        return urlsplit(url).path.lstrip("/")
    except ValueError:
        return ""


def _watched_file(store: JobStore | None, store_url: str | None) -> str | None:
    return store_database(store) if store is not None else sqlite_database(store_url)


__all__ = [
    "CLUSTER_BACKEND",
    "CLUSTER_CHANNEL",
    "CLUSTER_SQLITE_CHECK_INTERVAL",
    "CLUSTER_URL",
    "DATABASE_CHANNEL",
    "DATABASE_SOURCE",
    "PostgresNotifyClusterCoordinator",
    "RedisClusterCoordinator",
    "StoreBackedStartupCoordinator",
    "behind_transaction_pooler",
    "decode_hint",
    "encode_hint",
    "libpq_url",
    "sqlite_database",
    "store_database",
]
