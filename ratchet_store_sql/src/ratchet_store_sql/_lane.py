"""A few psycopg connections of the store's own for its one-statement autocommit writes.

A single enqueue on PostgreSQL is one prepared ``INSERT`` in autocommit. Taken from
SQLAlchemy's pool, its connection cost as much client CPU again as the statement: the pool's
checkout and checkin (events, the liveness check, the reset's rollback), switching autocommit on
and off, and a new cursor each time (26 + 1.3 + 12 of 89 µs, measured in
benchmarks/README.md). A :class:`StatementLane` keeps up to ``size`` connections detached from
the pool, each always in autocommit with one cursor of its own, handed to one thread at a time
(last returned first). When every one is busy the caller uses the pool as before, so the lane
adds at most ``size`` connections to the pool's.

A lane connection is taken from the pool when the pool has one idle (the lane never waits on
a full pool: the caller then uses the pool's own path), so it was opened by the engine (its URL,
connect arguments and ``connect`` events), and is then detached: the pool opens another in its
place when it needs one. Before use, a lane connection idle longer than
``PING_AFTER_IDLE_SECONDS`` or whose socket shows the server closed it (or wrote to it unasked)
is pinged, and dropped if the ping fails, as the pool's liveness check does; under the engine's
``pool_pre_ping`` it is pinged every time, and it is replaced once older than ``pool_recycle``.
A connection that fails with a lost connection, or is left in a transaction, is closed, not
given back. In a forked child every lane forgets its parent's connections (without closing
them: that would end the parent's sessions) and takes a fresh lock, and its engine's pool does
the same (``Engine.dispose(close=False)``): the child opens connections of its own. ``close`` closes the idle ones; one in use is closed when it comes back.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from typing import Any

import sqlalchemy as sa

from ratchet_store_sql import _engine
from ratchet_store_sql._engine import socket_is_quiet, socket_poller

LANE_SIZE = 2
"""Connections a store keeps for its one-statement writes (besides its pool)."""


class LaneConnection:
    """One detached psycopg connection in autocommit, its cursor and a poller on its socket."""

    __slots__ = ("cursor", "driver", "last_used", "opened", "poller")

    def __init__(self, driver: Any) -> None:
        self.driver = driver
        self.cursor = driver.cursor()
        self.opened = self.last_used = time.monotonic()
        self.poller = socket_poller(driver)

    def close(self) -> None:
        self.close_driver(self.driver)

    @staticmethod
    def close_driver(driver: Any) -> None:
        # a broken connection may fail to close: it is gone either way
        with contextlib.suppress(Exception):
            driver.close()


class StatementLane:
    """Up to ``size`` detached autocommit connections of ``engine`` (see the module
    docstring). Thread safe: ``take`` hands a connection to one caller, who gives it back
    with ``give``."""

    def __init__(self, engine: sa.Engine, size: int = LANE_SIZE) -> None:
        self._engine = engine
        self._size = size
        self._idle: list[LaneConnection] = []
        self._open = 0  # idle and in use
        self._lock = threading.Lock()
        self._closed = False
        _LANES.add(self)

    def _after_fork(self) -> None:
        """In a forked child (one thread, right after the fork): forget the parent's
        connections without closing them (that would end the parent's sessions), take a
        fresh lock (the parent's may have been held), and drop the engine's pooled
        connections the same way (``Engine.dispose(close=False)``, SQLAlchemy's rule for a
        fork), so the child opens its own."""
        self._lock = threading.Lock()
        self._idle, self._open = [], 0
        self._engine.dispose(close=False)

    def take(self) -> LaneConnection | None:
        """A lane connection for one statement, or None when every one is in use or none can
        be opened without waiting on the pool (use the pool then)."""
        while True:
            with self._lock:
                if self._closed:
                    return None
                if self._idle:
                    lane = self._idle.pop()
                elif self._open < self._size:
                    self._open += 1
                    lane = None
                else:
                    return None
            if lane is None:
                return self._new()
            try:
                alive = self._alive(lane)
            except BaseException:
                self._drop(lane)
                raise
            if alive:
                return lane
            self._drop(lane)

    def give(self, lane: LaneConnection, *, failed: bool = False) -> None:
        """``lane`` back after its statement; after a failure (``failed``) only if it is
        still open, not broken and in no transaction, else it is closed."""
        with self._lock:
            if not self._closed and (not failed or _usable(lane.driver)):
                lane.last_used = time.monotonic()
                self._idle.append(lane)
                return
        self._drop(lane)

    def close(self) -> None:
        """Close the idle connections; those in use are closed when they come back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for lane in idle:
            self._drop(lane)

    def _drop(self, lane: LaneConnection) -> None:
        with self._lock:
            self._open -= 1
        lane.close()

    def _new(self) -> LaneConnection | None:
        """A connection detached from the pool for the lane, taken only when the pool has
        one idle (never waiting on a full pool, which the caller then waits on once)."""
        driver: Any = None
        try:
            pool: Any = self._engine.pool
            checkedin = getattr(pool, "checkedin", None)
            if checkedin is None or checkedin() == 0:
                raise _NoIdleConnection
            proxied = self._engine.raw_connection()
            driver = proxied.driver_connection
            proxied.detach()
            if not _usable(driver):  # a connect hook left it in a transaction
                driver.rollback()
            driver.autocommit = True
            return LaneConnection(driver)
        except BaseException as exc:
            with self._lock:
                self._open -= 1
            if driver is not None:
                LaneConnection.close_driver(driver)
            if isinstance(exc, Exception):
                return None  # the pool's path tries (and reports) the connection itself
            raise

    def _alive(self, lane: LaneConnection) -> bool:
        """The pool's liveness rule (``install_liveness_check``): no round trip for a
        connection used within ``PING_AFTER_IDLE_SECONDS`` whose socket is quiet, else the
        dialect's ping; every time under ``pool_pre_ping``. A connection older than the
        engine's ``pool_recycle`` is replaced."""
        driver = lane.driver
        if driver.closed or driver.broken:
            return False
        pool: Any = self._engine.pool
        recycle = getattr(pool, "_recycle", -1)
        if recycle is not None and recycle > -1 and time.monotonic() - lane.opened > recycle:
            return False
        if (
            not getattr(pool, "_pre_ping", False)
            and time.monotonic() - lane.last_used < _engine.PING_AFTER_IDLE_SECONDS
            and lane.poller is not None
            and socket_is_quiet(lane.poller)
        ):
            return True
        try:
            return self._engine.dialect.do_ping(driver) is not False
        except Exception:  # noqa: BLE001 - any failure of the ping: drop the connection
            return False


_LANES: weakref.WeakSet[StatementLane] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for lane in list(_LANES):
        lane._after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


class _NoIdleConnection(Exception):
    """The pool has no idle connection to detach for the lane now."""


def _usable(driver: Any) -> bool:
    """Whether ``driver`` can serve another statement: open, not broken, in no transaction."""
    if driver.closed or driver.broken:
        return False
    from psycopg.pq import TransactionStatus  # the extra's driver (this module may load without)

    return bool(driver.pgconn.transaction_status == TransactionStatus.IDLE)


__all__ = ["LANE_SIZE", "LaneConnection", "StatementLane"]
