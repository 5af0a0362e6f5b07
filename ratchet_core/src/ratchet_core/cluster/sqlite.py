"""Wake-ups between processes sharing a SQLite file (``cluster.backend`` ``auto`` or ``sqlite``).

SQLite has no ``NOTIFY``: the file is the message. The listener thread of a worker asks the
database whether another connection committed (``PRAGMA data_version``, which reads no table)
and, when one did, whether the jobs table's highest rowid grew (a job was inserted). It asks

* on Linux, when the operating system reports a write to the database's files (inotify on the
  file's directory, through ``ctypes``: the standard library has no binding), then again after
  1, 2, 4 ... ms for ``SETTLE_SECONDS`` (a commit becomes visible after its write, past the
  WAL's fsync; at most every half ``interval`` while writes go on), and once a second without
  events (file systems whose writes inotify does not see). An idle worker checks about a
  dozen times after each write of its own heartbeat;
* elsewhere (macOS, Windows) every ``interval`` seconds: about 1-2 % of a core on a small VM
  at the default 10 ms.

Wake-ups only shorten the poller's wait: a missed one delays a job until the next poll.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import sqlite3
import struct
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ratchet_api.model import JobPriority, NodeIdentity
from ratchet_core.cluster.coordination import (
    DATABASE_CHANNEL,
    DATABASE_SOURCE,
    _ListenerThreadCoordinator,
    encode_hint,
)

_log = logging.getLogger("ratchet.cluster")

_IN_MODIFY = 0x002
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)
SETTLE_SECONDS = 0.5
"""After the last file event, how long the database is still checked (after 1, 2, 4 ... ms,
up to ``SETTLE_MAX_PAUSE`` apart): a commit becomes visible after its write, past the WAL's
fsync. Checks set off by events come at most every half ``interval``."""
SETTLE_MAX_PAUSE = 0.1
"""The longest pause between those checks while no further write is reported."""
IDLE_CHECK_SECONDS = 1.0
"""With file events, the database is also checked after this long without any (a file system
whose writes inotify does not see, such as NFS, then behaves like polling once a second)."""

WRITTEN = 1
REPLACED = 2


class DirectoryEvents:
    """Writes to the files of one database (``name``, ``name-wal``, ``name-journal``) in its
    directory, reported by Linux inotify. :meth:`open` gives None where that is unavailable."""

    def __init__(self, fd: int, name: bytes) -> None:
        self._fd = fd
        self._name = name
        self._lock = threading.Lock()  # interrupt() never writes to a closed (reused) fd
        self._closed = False
        self._wake_r, self._wake_w = os.pipe()
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLIN)
        self._poll.register(self._wake_r, select.POLLIN)

    @classmethod
    def open(cls, database: str) -> DirectoryEvents | None:
        if not sys.platform.startswith("linux"):
            return None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            init, add = libc.inotify_init1, libc.inotify_add_watch
        except (OSError, AttributeError):
            return None
        fd = int(init(os.O_NONBLOCK | os.O_CLOEXEC))
        if fd < 0:
            return None
        try:
            directory = os.fsencode(os.path.dirname(database))
            if add(fd, directory, _IN_MODIFY | _IN_CREATE | _IN_MOVED_TO) < 0:
                raise OSError(ctypes.get_errno(), "inotify_add_watch failed")
            return cls(fd, os.fsencode(os.path.basename(database)))
        except OSError:
            os.close(fd)
            return None

    def wait(self, timeout: float) -> int:
        """Block until the database's files are written, :meth:`interrupt` or ``timeout``;
        the :meth:`drain` flags (0: nothing happened to the database)."""
        ready = {fd for fd, _ in self._poll.poll(timeout * 1000)}
        return self.drain() if self._fd in ready else 0

    def drain(self) -> int:
        """Read the events queued so far (never blocks): ``WRITTEN`` when the database's files
        were written (or events were lost), ``REPLACED`` when the database file itself was
        created or moved in anew, or the watch ended (its directory is gone)."""
        flags = 0
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return flags
            if not data:
                return flags
            offset = 0
            while offset + _EVENT.size <= len(data):
                _wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
                start = offset + _EVENT.size
                name = data[start : start + length].rstrip(b"\0")
                offset = start + length
                if mask & _IN_IGNORED:
                    flags |= REPLACED
                elif mask & _IN_Q_OVERFLOW:
                    flags |= WRITTEN
                elif name == self._name and mask & (_IN_CREATE | _IN_MOVED_TO):
                    flags |= REPLACED
                elif name.startswith(self._name):
                    flags |= WRITTEN

    def interrupt(self) -> None:
        with self._lock:
            if not self._closed:
                os.write(self._wake_w, b"x")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for fd in (self._fd, self._wake_r, self._wake_w):
                with contextlib.suppress(OSError):
                    os.close(fd)


class SqliteFileClusterCoordinator(_ListenerThreadCoordinator):
    """Wake-ups between processes sharing a SQLite file, with nothing to run beside them (see
    the module docstring). ``database`` is the file's absolute path. Nothing is published: an
    enqueuing process's commit is the message, whatever that process's own settings. Wake-ups
    that only an update makes due (a retry's backoff ends, a workflow step is released) are
    found by polling, as with PostgreSQL's insert trigger."""

    name = "sqlite"

    def __init__(
        self,
        database: str,
        node_id: str,
        *,
        interval: float = 0.01,
        file_events: bool = True,
    ) -> None:
        super().__init__(node_id, DATABASE_CHANNEL)
        self.database = database
        self.interval = max(0.0005, interval)
        self.file_events = file_events
        """Wait for the operating system's file events (where available) instead of checking
        every ``interval``."""
        self.database_notifies_inserts = True
        """The insert's commit is what the listeners see: the scheduler publishes nothing."""
        self.watching_events = False
        """True while the listener waits on file events (False: it checks every interval)."""
        self._message = encode_hint(JobPriority.NORMAL, NodeIdentity(node_id=DATABASE_SOURCE), None)
        self._events: DirectoryEvents | None = None

    def notify_new_work(
        self, priority: int, source: NodeIdentity, execution_target: str | None
    ) -> None:
        """Nothing to send: the insert's commit wakes the other processes' listeners."""

    def _interrupt(self) -> None:
        events = self._events
        if events is not None:
            events.interrupt()

    def _listen(self, deliver: Callable[[str], None]) -> None:
        try:
            # read-write but never created here: a missing file (the schema not created yet,
            # or a store that is not this file) is looked for again a second later
            conn = sqlite3.connect(
                Path(self.database).as_uri() + "?mode=rw",
                uri=True,
                timeout=5.0,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.OperationalError:
            if not os.path.exists(self.database):
                self._closed.wait(1.0)
                return
            raise
        events: DirectoryEvents | None = None
        try:
            events = DirectoryEvents.open(self.database) if self.file_events else None
            self._events = events
            self.watching_events = events is not None
            self._watch(conn, events, deliver)
        finally:
            self._events = None
            if events is not None:
                events.close()
            conn.close()

    def _watch(
        self,
        conn: sqlite3.Connection,
        events: DirectoryEvents | None,
        deliver: Callable[[str], None],
    ) -> None:
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        newest = _newest(conn)
        self._subscribed.set()
        settle_until = 0.0  # after a file event: keep checking until then
        step = 0.001  # pause before the next of those checks (doubles, up to SETTLE_MAX_PAUSE)
        last_check = 0.0
        next_check: float | None = None  # None: wait for a file event (up to a second)
        gap = self.interval / 2  # checks set off by events come at most this often
        while not self._closed.is_set():
            if events is None:
                time.sleep(self.interval)  # a plain sleep: half an Event wait's CPU on a VM
            else:
                clock = time.monotonic()
                if next_check is None:
                    flags = events.wait(IDLE_CHECK_SECONDS)
                elif next_check > clock:
                    flags = events.wait(next_check - clock)
                else:
                    flags = events.drain()
                if flags & REPLACED:
                    return  # reconnect: the file (or its directory) is a new one
                clock = time.monotonic()
                if flags:
                    settle_until = clock + SETTLE_SECONDS
                    step = 0.001
                    due = max(clock, last_check + gap)
                    next_check = due if next_check is None else min(next_check, due)
                if next_check is not None and clock < next_check:
                    continue
                # a check now: one that was due, or once a second without any event
                last_check = clock
                if clock < settle_until:
                    next_check = clock + step
                    step = min(SETTLE_MAX_PAUSE, step * 2)
                else:
                    next_check = None
            now = conn.execute("PRAGMA data_version").fetchone()[0]
            if now == version:
                continue
            try:
                latest = _newest(conn)
            except sqlite3.OperationalError:  # locked: looked at again next round
                continue
            version = now
            if latest != newest:
                grew = latest is not None and (newest is None or latest > newest)
                newest = latest
                if grew:
                    deliver(self._message)


def _newest(conn: Any) -> int | None:
    """The jobs table's highest rowid; None without the table (the schema not created yet:
    the worker refuses to start anyway). Raises ``sqlite3.OperationalError`` when the database
    cannot be read now (locked)."""
    try:
        row = conn.execute("SELECT max(rowid) FROM ratchet_jobs").fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return None
        raise
    return None if row is None or row[0] is None else int(row[0])


__all__ = [
    "IDLE_CHECK_SECONDS",
    "SETTLE_MAX_PAUSE",
    "SETTLE_SECONDS",
    "DirectoryEvents",
    "SqliteFileClusterCoordinator",
]
