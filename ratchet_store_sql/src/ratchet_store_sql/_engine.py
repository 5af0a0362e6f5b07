"""Engine creation and the SQLite connection setup (WAL, busy timeout, BEGIN IMMEDIATE)."""

from __future__ import annotations

import select
import sqlite3
import time
from importlib.util import find_spec
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from ratchet_api.errors import StoreError

SQLITE_BUSY_TIMEOUT_MS = 10_000
IMMEDIATE = "ratchet_sqlite_immediate"
"""Execution option: the transaction of this connection starts with ``BEGIN IMMEDIATE``."""

_HOOKED = "_ratchet_sqlite_hooked"

SQLITE_LOCK_RETRY_SECONDS = (0.0002, 0.002)
"""The first and the longest pause between two tries of ``BEGIN IMMEDIATE`` on a busy file."""


def begin_immediate(driver: Any) -> None:
    """``BEGIN IMMEDIATE`` on the sqlite3 connection ``driver``, waiting up to its busy timeout
    for the write lock in pauses of at most 2 ms.

    SQLite's own busy handler sleeps 1, 2, 5, 10 ... 100 ms between tries, each pause longer
    than the last: a writer that comes to a file another process writes all the time (a busy
    worker's claims and completions) can sleep through dozens of short transactions and wait
    100 to 600 ms for a lock that was free most of that time. A connection with no busy
    timeout (a REQUIRES_NEW write under a held lock) fails at once as before."""
    (timeout_ms,) = driver.execute("PRAGMA busy_timeout").fetchone()
    if not timeout_ms:
        driver.execute("BEGIN IMMEDIATE")
        return
    driver.execute("PRAGMA busy_timeout=0")
    try:
        pause, longest = SQLITE_LOCK_RETRY_SECONDS
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            try:
                driver.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise
            time.sleep(pause)
            pause = min(longest, pause * 2)
    finally:
        driver.execute(f"PRAGMA busy_timeout={int(timeout_ms)}")


# A URL without a driver (``postgresql://``, ``mysql://``, ``mariadb://``) names SQLAlchemy's
# default DBAPI (psycopg2, mysqlclient), which Ratchet's extras do not install. When that default
# is missing and the extra's driver is present, the URL is given the extra's driver.
_DEFAULT_DBAPI = {"postgresql": "psycopg2", "mysql": "MySQLdb", "mariadb": "MySQLdb"}
_EXTRA_DRIVER = {"postgresql": "psycopg", "mysql": "pymysql", "mariadb": "pymysql"}
_EXTRA_NAME = {"postgresql": "postgresql", "mysql": "mysql", "mariadb": "mysql"}


def _installed(module: str) -> bool:
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def resolve_driver(url: sa.URL) -> sa.URL:
    """``url`` with the driver of Ratchet's extra (psycopg 3, PyMySQL) when it names no driver
    and SQLAlchemy's default DBAPI for its backend is not installed; otherwise ``url``."""
    backend = url.get_backend_name()
    if "+" in url.drivername or backend not in _DEFAULT_DBAPI:
        return url
    if _installed(_DEFAULT_DBAPI[backend]) or not _installed(_EXTRA_DRIVER[backend]):
        return url
    return url.set(drivername=f"{backend}+{_EXTRA_DRIVER[backend]}")


def _driver_hint(url: sa.URL) -> str:
    backend = url.get_backend_name()
    extra = _EXTRA_NAME.get(backend)
    if extra is None:
        return ""
    wanted = f"{backend}+{_EXTRA_DRIVER[backend]}"
    if url.drivername == wanted:
        return f" (install ratchet-store-sql[{extra}])"
    return (
        f" (Ratchet's extra ratchet-store-sql[{extra}] installs the driver of {wanted}://: "
        f"install it and use a {wanted}:// URL)"
    )


def create_store_engine(
    url: str | sa.URL,
    *,
    pool_size: int | None = None,
    busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS,
    **engine_kwargs: Any,
) -> sa.Engine:
    """An engine for ``url`` set up for Ratchet (SQLite: WAL, busy timeout, explicit BEGIN).

    A URL without a driver uses the driver of Ratchet's extra when SQLAlchemy's default DBAPI
    is missing (see :func:`resolve_driver`). A PostgreSQL URL's ``ratchet_pooler=transaction``
    option says a transaction-pooling PgBouncer is in between: psycopg then prepares no
    statement (``prepare_threshold=None``, see :func:`explicit_prepare`).
    """
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise StoreError(f"invalid database URL {url!r}: {exc}") from exc
    parsed = resolve_driver(parsed)
    kwargs: dict[str, Any] = dict(engine_kwargs)
    backend = parsed.get_backend_name()
    pooler = _pooler_mode(parsed)
    history = _history_partition(parsed)
    claim_commit = _url_choice(parsed, CLAIM_COMMIT_OPTION, CLAIM_COMMIT_MODES, "claim commits")
    parsed = parsed.difference_update_query(
        [POOLER_OPTION, HISTORY_PARTITION_OPTION, CLAIM_COMMIT_OPTION]
    )
    if pooler == "transaction" and parsed.get_driver_name() == "psycopg":
        # A transaction-pooling PgBouncer (before 1.21) hands each transaction to any server
        # connection, where a statement psycopg prepared on another one does not exist: never
        # prepare (every statement is sent with its parameters, as the extended protocol's
        # unnamed statement, which lives only for its own execution).
        connect_args = dict(kwargs.get("connect_args") or {})
        connect_args.setdefault("prepare_threshold", None)
        kwargs["connect_args"] = connect_args
    synchronous = SQLITE_SYNCHRONOUS_DEFAULT
    if backend == "sqlite":
        synchronous = _sqlite_synchronous(parsed)
        parsed = parsed.difference_update_query(["synchronous"])
        if pool_size is not None:
            kwargs.setdefault("pool_size", pool_size)
    else:
        kwargs.setdefault("pool_size", pool_size or 10)
        kwargs.setdefault("max_overflow", 10)
        kwargs.setdefault("pool_recycle", 3600)
        # The most recently returned connection first: its server process is the one still
        # warm, and connections the worker does not need stay idle (ping-free checkouts)
        kwargs.setdefault("pool_use_lifo", True)
    # A pooled connection the server dropped is found at checkout and replaced before any
    # statement is sent: by SQLAlchemy's ping on every checkout when the caller asks for
    # pool_pre_ping, otherwise by the cheaper check of install_liveness_check.
    liveness = backend != "sqlite" and "pool_pre_ping" not in kwargs
    if backend in ("mysql", "mariadb"):
        # InnoDB's REPEATABLE READ takes gap locks that make claimers and completers deadlock;
        # every statement of the store is written for READ COMMITTED.
        kwargs.setdefault("isolation_level", "READ COMMITTED")
    try:
        engine = sa.create_engine(parsed, **kwargs)
    except (ImportError, sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as exc:
        hint = _driver_hint(parsed)
        raise StoreError(f"cannot create an engine for {parsed!r}: {exc}{hint}") from exc
    setattr(engine, _POOLER, pooler)
    if history is not None:
        setattr(engine, _HISTORY_PARTITION, history)
    if claim_commit is not None:
        setattr(engine, _CLAIM_COMMIT, claim_commit)
    if backend == "sqlite":
        configure_sqlite(engine, busy_timeout_ms=busy_timeout_ms, synchronous=synchronous)
    if liveness:
        install_liveness_check(engine)
    return engine


POOLER_OPTION = "ratchet_pooler"
"""URL option naming the connection pooler between the store and PostgreSQL
(``?ratchet_pooler=transaction``); Ratchet's own, removed before the URL reaches the driver."""
POOLER_MODES = ("none", "session", "transaction")
_POOLER = "_ratchet_pooler"


def _url_choice(url: sa.URL, option: str, choices: tuple[str, ...], purpose: str) -> str | None:
    """The value of Ratchet's URL option ``option`` (None when absent), lower-cased and checked
    against ``choices``; ``StoreError`` naming the option for another value, or when the
    database is not PostgreSQL (``purpose`` says what the option is for there)."""
    raw = url.query.get(option)
    if raw is None:
        return None
    value = (raw if isinstance(raw, str) else raw[-1]).strip().lower()
    if option == POOLER_OPTION and value == "statement":
        raise StoreError(
            f"invalid URL option {POOLER_OPTION}=statement: a statement-pooling PgBouncer "
            "cannot run the store's multi-statement transactions; use pool_mode = transaction "
            f"and {POOLER_OPTION}=transaction"
        )
    if value not in choices:
        raise StoreError(
            f"invalid URL option {option}={raw!r}: expected one of {', '.join(choices)}"
        )
    if value != "none" and url.get_backend_name() != "postgresql":
        raise StoreError(
            f"URL option {option} is for PostgreSQL ({purpose}), not {url.get_backend_name()}"
        )
    return value


def _pooler_mode(url: sa.URL) -> str:
    """The ``ratchet_pooler`` option of ``url`` (``none`` when absent)."""
    return _url_choice(url, POOLER_OPTION, POOLER_MODES, "PgBouncer") or "none"


HISTORY_PARTITION_OPTION = "ratchet_history_partition"
"""URL option naming the width of PostgreSQL's history partitions (``hour``, ``day`` or
``week``; ``?ratchet_history_partition=week``); Ratchet's own, removed before the URL reaches
the driver."""
_HISTORY_PARTITION = "_ratchet_history_partition"
HISTORY_PARTITION_NAMES = ("hour", "day", "week")
"""The history partition widths by name (``_capabilities/history.py`` gives their lengths)."""


def _history_partition(url: sa.URL) -> str | None:
    """The ``ratchet_history_partition`` option of ``url`` (None when absent)."""
    return _url_choice(
        url, HISTORY_PARTITION_OPTION, HISTORY_PARTITION_NAMES, "partitioned history"
    )


def history_partition(engine: sa.Engine) -> str | None:
    """The history partition width ``engine``'s URL named, or None when it named none."""
    value = getattr(engine, _HISTORY_PARTITION, None)
    return None if value is None else str(value)


CLAIM_COMMIT_OPTION = "ratchet_claim_commit"
"""URL option saying whether PostgreSQL's claims and started marks wait for the WAL flush at
commit (``sync``) or not (``async``, the default; ``?ratchet_claim_commit=sync``); Ratchet's
own, removed before the URL reaches the driver. See docs/stores/postgresql.md, Durability."""
CLAIM_COMMIT_MODES = ("async", "sync")
_CLAIM_COMMIT = "_ratchet_claim_commit"


def claim_commit_async(engine: sa.Engine) -> bool:
    """Whether ``engine``'s claims and started marks commit without waiting for the WAL flush
    (its URL's ``ratchet_claim_commit``, ``async`` when absent)."""
    return getattr(engine, _CLAIM_COMMIT, "async") == "async"


def pooler_mode(engine: sa.Engine) -> str:
    """The pooler mode ``engine`` was created for (its URL's ``ratchet_pooler`` option):
    ``none``, ``session`` or ``transaction``; ``none`` for an engine Ratchet did not create."""
    return str(getattr(engine, _POOLER, "none"))


def explicit_prepare(engine: sa.Engine) -> bool | None:
    """psycopg's ``prepare`` argument for the store's hot statements: True (a server-side
    prepared statement) unless ``engine`` is behind a transaction pooler, where a statement
    prepared on one server connection is missing on the next; None then (psycopg's
    ``prepare_threshold``, which such an engine sets to never)."""
    return None if pooler_mode(engine) == "transaction" else True


PING_AFTER_IDLE_SECONDS = 10.0
"""A pooled connection idle longer than this is pinged at checkout (PgBouncer's
``server_check_delay`` rule); one used more recently is pinged only if its socket shows the
server closed it or sent something unasked."""

_LAST_USED = "ratchet_last_used"


def _socket_of(dbapi_connection: Any) -> int | None:
    """The file descriptor of a DBAPI connection's socket (psycopg 3, PyMySQL), else None."""
    fileno = getattr(dbapi_connection, "fileno", None)  # psycopg 3
    if fileno is None:
        sock = getattr(dbapi_connection, "_sock", None)  # PyMySQL
        fileno = getattr(sock, "fileno", None)
    if fileno is None:
        return None
    try:
        fd = fileno()
    except Exception:  # noqa: BLE001 - a closed connection has no socket: ping it
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None


def socket_poller(dbapi_connection: Any) -> Any:
    """A ``select.poll`` object watching the socket of ``dbapi_connection`` for input, or
    None where there is none (no socket, no poll(2) as on Windows: the caller pings)."""
    fd = _socket_of(dbapi_connection)
    if fd is None or not hasattr(select, "poll"):
        return None
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return poller


def socket_is_quiet(poller: Any) -> bool:
    """True when the idle connection's socket watched by ``poller`` has nothing to read: the
    server has neither closed it (restart, ``pg_terminate_backend``, ``KILL``, idle timeout:
    the socket reads EOF or a FATAL message) nor sent anything. No round trip."""
    try:
        return not poller.poll(0)
    except (OSError, ValueError):
        return False


def idle_socket_is_quiet(dbapi_connection: Any) -> bool:
    """:func:`socket_is_quiet` for the socket of ``dbapi_connection`` (False without one)."""
    poller = socket_poller(dbapi_connection)
    return poller is not None and socket_is_quiet(poller)


def install_liveness_check(engine: sa.Engine) -> None:
    """Replace SQLAlchemy's ping on every checkout by a check that costs no round trip for
    a connection in steady use: a connection is pinged only when it was idle longer than
    :data:`PING_AFTER_IDLE_SECONDS`, or when its socket is readable while idle (the server
    closed it or wrote to it). A failed ping discards the connection and the pool checks
    out another (``DisconnectionError``). A connection that dies between this check and its
    statement fails that statement, as with a ping; the stores retry transient errors."""
    dialect = engine.dialect

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        last_used = record.info.get(_LAST_USED)
        if (
            last_used is not None
            and time.monotonic() - last_used < PING_AFTER_IDLE_SECONDS
            and idle_socket_is_quiet(dbapi_connection)
        ):
            return
        try:
            alive = dialect.do_ping(dbapi_connection)
        except Exception as exc:
            raise sa.exc.DisconnectionError(f"pooled connection failed its ping: {exc}") from exc
        if alive is False:
            raise sa.exc.DisconnectionError("pooled connection failed its ping")

    @event.listens_for(engine, "connect")
    @event.listens_for(engine, "checkin")
    def _on_used(_dbapi_connection: Any, record: Any) -> None:
        record.info[_LAST_USED] = time.monotonic()


SQLITE_SYNCHRONOUS_DEFAULT = "FULL"
SQLITE_SYNCHRONOUS_VALUES = ("FULL", "NORMAL", "EXTRA", "OFF")


def _sqlite_synchronous(url: sa.URL) -> str:
    raw = url.query.get("synchronous", SQLITE_SYNCHRONOUS_DEFAULT)
    value = (raw if isinstance(raw, str) else raw[-1]).strip().upper()
    if value not in SQLITE_SYNCHRONOUS_VALUES:
        raise StoreError(
            f"invalid SQLite URL option synchronous={raw!r}: expected one of "
            f"{', '.join(v.lower() for v in SQLITE_SYNCHRONOUS_VALUES)}"
        )
    return value


def configure_sqlite(
    engine: sa.Engine,
    *,
    busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS,
    synchronous: str = SQLITE_SYNCHRONOUS_DEFAULT,
) -> None:
    """Install the connection hooks on a SQLite engine (idempotent).

    ``synchronous`` is SQLite's ``PRAGMA synchronous`` in WAL mode: ``FULL`` (the default, as
    SQLite's own) makes every commit durable against power loss; ``NORMAL`` is durable against
    a crash of the process but a power loss can drop the last commits, for fewer fsyncs.

    pysqlite's own transaction handling is switched off so that SQLAlchemy's ``begin`` emits the
    ``BEGIN``: a write transaction of the store emits ``BEGIN IMMEDIATE`` and so takes the write
    lock before it reads (two processes can never claim the same job), and SAVEPOINTs work.
    """
    if getattr(engine, _HOOKED, False):
        return
    setattr(engine, _HOOKED, True)
    memory = engine.url.database in (None, "", ":memory:")

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            if not memory:
                cursor.execute("PRAGMA journal_mode=WAL")
                cursor.execute(f"PRAGMA synchronous={synchronous}")
            cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            cursor.execute("PRAGMA foreign_keys=ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        if conn.get_execution_options().get(IMMEDIATE):
            try:
                begin_immediate(conn.connection.driver_connection)
            except sqlite3.Error as exc:  # raised as SQLAlchemy raises a statement's error
                raise sa.exc.DBAPIError.instance(
                    "BEGIN IMMEDIATE", None, exc, sqlite3.Error
                ) from exc
        else:
            conn.exec_driver_sql("BEGIN")


__all__ = [
    "IMMEDIATE",
    "POOLER_MODES",
    "POOLER_OPTION",
    "SQLITE_BUSY_TIMEOUT_MS",
    "SQLITE_SYNCHRONOUS_DEFAULT",
    "PING_AFTER_IDLE_SECONDS",
    "begin_immediate",
    "configure_sqlite",
    "create_store_engine",
    "explicit_prepare",
    "install_liveness_check",
    "HISTORY_PARTITION_NAMES",
    "HISTORY_PARTITION_OPTION",
    "history_partition",
    "pooler_mode",
]
