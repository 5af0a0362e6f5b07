"""Wake-ups between processes sharing a SQLite file (``cluster.backend`` ``auto`` or ``sqlite``).

SQLite has no ``NOTIFY``: the file is the message. The listener thread of a worker asks the
database whether another connection committed (``PRAGMA data_version``, which reads no table)
and, when one did, whether the jobs table's highest rowid grew (a job was inserted). It asks

* when the operating system reports a write to the database's files (Linux inotify on the
  file's directory, through ``ctypes``: the standard library has no binding), and then again
  after 1, 2, 4 ... ms up to ``interval``, for ``SETTLE_ROUNDS`` rounds, so that a commit whose
  index is updated just after its write (an fsync comes between) is not missed; an idle
  worker then checks only when its own heartbeat writes the file;
* every ``interval`` seconds elsewhere (macOS, Windows, a ``file:`` URI database, or when inotify
  cannot be set up): about 1-2 % of a core on a small VM at the default 10 ms.

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
import time
from collections.abc import Callable
from typing import Any

from ratchet_api.model import JobPriority, NodeIdentity
from ratchet_core.cluster import (
    DATABASE_CHANNEL,
    DATABASE_SOURCE,
    _ListenerThreadCoordinator,
    encode_hint,
)

_log = logging.getLogger("ratchet.cluster")

_IN_MODIFY = 0x002
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)
SETTLE_ROUNDS = 10
"""Checks made every ``interval`` after the last file event, before waiting for the next."""


class DirectoryEvents:
    """Writes to the files of one database (``name``, ``name-wal``, ``name-journal``) in its
    directory, reported by Linux inotify. :meth:`open` gives None where that is unavailable."""

    def __init__(self, fd: int, prefix: bytes) -> None:
        self._fd = fd
        self._prefix = prefix
        self._wake_r, self._wake_w = os.pipe()

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
        directory = os.path.dirname(os.path.abspath(database))
        if add(fd, os.fsencode(directory), _IN_MODIFY | _IN_CREATE | _IN_MOVED_TO) < 0:
            os.close(fd)
            return None
        return cls(fd, os.fsencode(os.path.basename(database)))

    def wait(self, timeout: float) -> bool:
        """Block until the database's files are written, :meth:`interrupt` or ``timeout``;
        True when they were written."""
        ready, _, _ = select.select([self._fd, self._wake_r], [], [], timeout)
        return self._fd in ready and self.drain()

    def drain(self) -> bool:
        """Read the events queued so far (never blocks); True if one concerns the database."""
        seen = False
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return seen
            if not data:
                return seen
            offset = 0
            while offset + _EVENT.size <= len(data):
                length = _EVENT.unpack_from(data, offset)[3]
                name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
                offset += _EVENT.size + length
                if name.startswith(self._prefix):
                    seen = True

    def interrupt(self) -> None:
        with contextlib.suppress(OSError):  # closed already
            os.write(self._wake_w, b"x")

    def close(self) -> None:
        for fd in (self._fd, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


class SqliteFileClusterCoordinator(_ListenerThreadCoordinator):
    """Wake-ups between processes sharing a SQLite file, with nothing to run beside them (see
    the module docstring). Nothing is published: an enqueuing process's commit is the message,
    whatever that process's own settings. Wake-ups that only an update makes due (a retry's
    backoff ends, a workflow step is released) are found by polling, as with PostgreSQL's
    insert trigger."""

    name = "sqlite"

    def __init__(
        self,
        database: str,
        node_id: str,
        *,
        uri: bool = False,
        interval: float = 0.01,
        file_events: bool = True,
    ) -> None:
        super().__init__(node_id, DATABASE_CHANNEL)
        self.database = database
        self.uri = uri
        self.interval = max(0.0005, interval)
        self.file_events = file_events and not uri
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
        if not self.uri and not os.path.exists(self.database):
            # not created yet (or store.url is not the store in use): never create it here
            self._closed.wait(1.0)
            return
        conn = sqlite3.connect(
            self.database,
            uri=self.uri,
            timeout=5.0,
            isolation_level=None,
            check_same_thread=False,
        )
        events = DirectoryEvents.open(self.database) if self.file_events else None
        self._events = events
        self.watching_events = events is not None
        try:
            version = conn.execute("PRAGMA data_version").fetchone()[0]
            newest = _newest(conn)
            self._subscribed.set()
            settle = 0  # checks still due after the last file event
            while not self._closed.is_set():
                if events is not None and settle == 0:
                    if not events.wait(1.0):
                        continue
                    settle = SETTLE_ROUNDS
                else:
                    # After a file event the commit may not be visible yet (the write comes
                    # before its fsync and index update): look again after 1, 2, 4 ... ms, up
                    # to the interval. A plain sleep: half the CPU of an Event wait on a VM.
                    since = SETTLE_ROUNDS - settle if events is not None else 16
                    time.sleep(min(self.interval, 0.001 * 2 ** min(since, 16)))
                    if events is not None:
                        settle = SETTLE_ROUNDS if events.drain() else settle - 1
                now = conn.execute("PRAGMA data_version").fetchone()[0]
                if now == version:
                    continue
                version = now
                latest = _newest(conn)
                if latest != newest:
                    grew = latest is not None and (newest is None or latest > newest)
                    newest = latest
                    if grew:
                        deliver(self._message)
        finally:
            self._events = None
            if events is not None:
                events.close()
            conn.close()


def _newest(conn: Any) -> int | None:
    try:
        row = conn.execute("SELECT max(rowid) FROM ratchet_jobs").fetchone()
    except sqlite3.OperationalError:  # no schema yet: the worker refuses to start anyway
        return None
    return None if row is None or row[0] is None else int(row[0])


__all__ = ["SETTLE_ROUNDS", "DirectoryEvents", "SqliteFileClusterCoordinator"]
