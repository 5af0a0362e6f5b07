"""A few psycopg connections of the store's own for its one-statement autocommit writes.

A single enqueue on PostgreSQL is one prepared ``INSERT`` in autocommit. Taken from
SQLAlchemy's pool, its connection cost as much client CPU again as the statement: the pool's
checkout and checkin (events, the liveness check, the reset's rollback), switching autocommit on
and off, and a new cursor each time (26 + 1.3 + 12 of 89 µs, measured in
benchmarks/README.md). A :class:`StatementLane` keeps up to ``size`` connections detached from
the pool, each always in autocommit with one cursor of its own, handed to one thread at a time
(last returned first). When every one is busy the caller uses the pool as before, so the lane
adds at most ``size`` connections to the pool's.

Connections are opened through the engine (its URL, connect arguments and ``connect`` events),
then detached from its pool. Before use, one idle longer than ``PING_AFTER_IDLE_SECONDS`` or
whose socket shows the server closed it (or wrote to it unasked) is pinged, and dropped if the
ping fails, as the pool's liveness check does. A connection that fails with a lost connection is closed, not
given back. After ``os.fork`` the child never touches its parent's connections (they are
forgotten, not closed: closing would end the parent's sessions). ``close`` closes the idle ones;
one in use is closed when it comes back.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any

import sqlalchemy as sa

from ratchet_store_sql import _engine
from ratchet_store_sql._engine import socket_is_quiet, socket_poller

LANE_SIZE = 2
"""Connections a store keeps for its one-statement writes (besides its pool)."""


class LaneConnection:
    """One detached psycopg connection in autocommit, its cursor and a poller on its socket."""

    __slots__ = ("cursor", "driver", "last_used", "poller")

    def __init__(self, driver: Any) -> None:
        self.driver = driver
        self.cursor = driver.cursor()
        self.last_used = time.monotonic()
        self.poller = socket_poller(driver)

    def close(self) -> None:
        # a broken connection may fail to close: it is gone either way
        with contextlib.suppress(Exception):
            self.driver.close()


class StatementLane:
    """Up to ``size`` detached autocommit connections of ``engine`` (see the module
    docstring). Thread safe: ``take`` hands a connection to one caller, who gives it back
    with ``give``."""

    def __init__(self, engine: sa.Engine, size: int = LANE_SIZE) -> None:
        self._engine = engine
        self._size = size
        self._idle: list[LaneConnection] = []
        self._open = 0  # idle and in use, of this process
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._closed = False

    def take(self) -> LaneConnection | None:
        """A lane connection for one statement, or None when every one is in use or none
        can be opened (use the pool then)."""
        while True:
            with self._lock:
                if self._closed:
                    return None
                if self._pid != os.getpid():  # forked: forget the parent's connections
                    self._pid, self._idle, self._open = os.getpid(), [], 0
                if self._idle:
                    lane = self._idle.pop()
                elif self._open < self._size:
                    self._open += 1
                    lane = None
                else:
                    return None
            if lane is None:
                return self._new()
            if self._alive(lane):
                return lane
            lane.close()
            with self._lock:
                self._open -= 1

    def give(self, lane: LaneConnection, *, failed: bool = False) -> None:
        """``lane`` back after its statement; after a failure (``failed``) only if it is
        still open, not broken and in no transaction, else it is closed."""
        with self._lock:
            if (
                self._pid == os.getpid()
                and not self._closed
                and (not failed or _usable(lane.driver))
            ):
                lane.last_used = time.monotonic()
                self._idle.append(lane)
                return
            forked = self._pid != os.getpid()
            if not forked:
                self._open -= 1
        if not forked:  # a forked child never ends its parent's sessions
            lane.close()

    def close(self) -> None:
        """Close the idle connections; those in use are closed when they come back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            if self._pid != os.getpid():
                return  # a forked child: the parent's connections are not ours to end
            self._open -= len(idle)
        for lane in idle:
            lane.close()

    def _new(self) -> LaneConnection | None:
        try:
            proxied = self._engine.raw_connection()
        except sa.exc.SQLAlchemyError:
            with self._lock:
                self._open -= 1
            return None  # the pool's path tries (and reports) the connection itself
        driver: Any = proxied.driver_connection
        proxied.detach()
        driver.autocommit = True
        return LaneConnection(driver)

    def _alive(self, lane: LaneConnection) -> bool:
        """The pool's liveness rule (``install_liveness_check``): no round trip for a
        connection used within ``PING_AFTER_IDLE_SECONDS`` whose socket is quiet, else the
        dialect's ping."""
        driver = lane.driver
        if driver.closed or driver.broken:
            return False
        if (
            time.monotonic() - lane.last_used < _engine.PING_AFTER_IDLE_SECONDS
            and lane.poller is not None
            and socket_is_quiet(lane.poller)
        ):
            return True
        try:
            return self._engine.dialect.do_ping(driver) is not False
        except Exception:  # noqa: BLE001 - any failure of the ping: drop the connection
            return False


def _usable(driver: Any) -> bool:
    """Whether ``driver`` can serve another statement: open, not broken, in no transaction."""
    if driver.closed or driver.broken:
        return False
    from psycopg.pq import TransactionStatus  # the extra's driver (this module may load without)

    return bool(driver.pgconn.transaction_status == TransactionStatus.IDLE)


__all__ = ["LANE_SIZE", "LaneConnection", "StatementLane"]
