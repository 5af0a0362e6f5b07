"""Test servers: PostgreSQL, MariaDB and the Mongo wire-protocol server.

Each test session gets its own freshly created database on every server, so that concurrent
sessions (CI, several developers' runs) never share tables. On a developer's machine a server
that does not answer makes its tests skip with a reason naming the server; with ``CI=true`` a
missing server is a failure, never a skip.

Mongo: ``RATCHET_TEST_MONGO_URL`` names a server to use; without it the session starts the
SecantusDB wire-protocol test server itself (``secantusd-py``, installed by
requirements-dev.txt) on a free port, in memory, and stops it at the end of the session.

PgBouncer: the session starts Debian's ``pgbouncer`` (transaction pooling) on a free port in
front of the test PostgreSQL (:func:`pgbouncer_url`); without it the ``pgbouncer`` tests skip
with a reason naming pgbouncer, and fail with ``CI=true``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

PG_HOST = os.environ.get("RATCHET_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("RATCHET_TEST_PG_PORT", "5432"))
MARIADB_HOST = os.environ.get("RATCHET_TEST_MARIADB_HOST", "127.0.0.1")
MARIADB_PORT = int(os.environ.get("RATCHET_TEST_MARIADB_PORT", "3306"))
MONGO_URL_ENV = "RATCHET_TEST_MONGO_URL"

SESSION_SUFFIX = uuid.uuid4().hex[:10]


def _fresh_name() -> str:
    """A database name unique to this session and this call (one database per test module)."""
    return f"ratchet_test_{SESSION_SUFFIX}_{uuid.uuid4().hex[:6]}"


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def unavailable(server: str, detail: str) -> None:
    """Skip (developer machine) or fail (CI) because ``server`` does not answer."""
    message = f"{server} is not available: {detail}"
    if IN_CI:
        pytest.fail(f"{message} (CI=true: every backend must be tested)", pytrace=False)
    pytest.skip(message)


def create_postgres_database() -> str:
    """Create a database for this session; return its SQLAlchemy URL."""
    if not port_open(PG_HOST, PG_PORT):
        unavailable("PostgreSQL", f"nothing answers on {PG_HOST}:{PG_PORT}")
    import psycopg

    name = _fresh_name()
    with psycopg.connect(
        host=PG_HOST, port=PG_PORT, user="postgres", dbname="postgres", autocommit=True
    ) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"postgresql+psycopg://postgres@{PG_HOST}:{PG_PORT}/{name}"


def drop_postgres_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(
        host=PG_HOST, port=PG_PORT, user="postgres", dbname="postgres", autocommit=True
    ) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def create_mariadb_database() -> str:
    if not port_open(MARIADB_HOST, MARIADB_PORT):
        unavailable("MariaDB", f"nothing answers on {MARIADB_HOST}:{MARIADB_PORT}")
    import pymysql

    name = _fresh_name()
    conn = pymysql.connect(host=MARIADB_HOST, port=MARIADB_PORT, user="root", password="")
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        conn.commit()
    finally:
        conn.close()
    return f"mysql+pymysql://root@{MARIADB_HOST}:{MARIADB_PORT}/{name}?charset=utf8mb4"


def drop_mariadb_database(url: str) -> None:
    import pymysql

    name = url.rsplit("/", 1)[1].split("?", 1)[0]
    conn = pymysql.connect(host=MARIADB_HOST, port=MARIADB_PORT, user="root", password="")
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        conn.commit()
    finally:
        conn.close()


class SecantusServer:
    """The SecantusDB test server this session started (in memory, on a free port)."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.url: str | None = None
        self.error: str | None = None

    def start(self) -> str:
        """Start it (once per session); its ``mongodb://`` URL. Raises ``RuntimeError``."""
        if self.url is not None:
            return self.url
        if self.error is not None:
            raise RuntimeError(self.error)
        try:
            self.url = self._start()
        except RuntimeError as exc:
            self.error = str(exc)
            raise
        atexit.register(self.stop)
        return self.url

    def _start(self) -> str:
        binary = Path(sys.executable).with_name("secantusd-py")
        found = str(binary) if binary.exists() else shutil.which("secantusd-py")
        if found is None:
            raise RuntimeError(
                "secantusd-py (SecantusDB, from requirements-dev.txt) is not installed and "
                f"{MONGO_URL_ENV} is not set"
            )
        last = ""
        for _ in range(3):  # a free port can be taken between the probe and the bind
            port = _free_port()
            log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - kept for the server's life
                prefix="ratchet-secantus-", suffix=".log", delete=False
            )
            command = [found, "--host", "127.0.0.1", "--port", str(port)]
            command += ["--storage-path", ":memory:", "--log-level", "WARNING"]
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            log.close()
            url = f"mongodb://127.0.0.1:{port}/?retryWrites=false"
            if _answers(url, process, timeout=60):
                self.process = process
                return url
            _terminate(process)
            last = Path(log.name).read_text(errors="replace")[-500:]
        raise RuntimeError(f"the SecantusDB test server did not start: {last}")

    def stop(self) -> None:
        if self.process is not None:
            _terminate(self.process)
            self.process = None


SECANTUS = SecantusServer()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(url: str, process: subprocess.Popen[bytes], timeout: float) -> bool:
    import pymongo

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(
            url, serverSelectionTimeoutMS=500
        )
        try:
            client.admin.command("ping")
            return True
        except Exception:  # not up yet
            time.sleep(0.2)
        finally:
            client.close()
    return False


def _terminate(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


class PgBouncerServer:
    """A PgBouncer in transaction pooling mode this session started (Debian's ``pgbouncer``)
    on a free port of 127.0.0.1, in front of the test PostgreSQL for every database
    (``* = host=... port=...``), trust authentication; its config lives in a temp dir."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self.error: str | None = None
        self.directory: Path | None = None

    def start(self) -> int:
        """Start it (once per session); its port. Raises ``RuntimeError``."""
        if self.port is not None:
            return self.port
        if self.error is not None:
            raise RuntimeError(self.error)
        try:
            self.port = self._start()
        except RuntimeError as exc:
            self.error = str(exc)
            raise
        atexit.register(self.stop)
        return self.port

    def _start(self) -> int:
        found = shutil.which("pgbouncer") or next(
            (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if Path(p).exists()), None
        )
        if found is None:
            raise RuntimeError("pgbouncer is not installed (apt-get install pgbouncer)")
        self.directory = Path(tempfile.mkdtemp(prefix="ratchet-pgbouncer-"))
        # PgBouncer refuses to run as root: as root it switches to nobody, who must read these
        self.directory.chmod(0o755)
        users = self.directory / "users.txt"
        users.write_text('"postgres" ""\n')
        last = ""
        for _ in range(3):  # a free port can be taken between the probe and the bind
            port = _free_port()
            config = self.directory / "pgbouncer.ini"
            config.write_text(
                "[databases]\n"
                f"* = host={PG_HOST} port={PG_PORT}\n"
                "[pgbouncer]\n"
                f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
                f"auth_type = trust\nauth_file = {users}\n"
                "pool_mode = transaction\n"
                # one module's database at a time per test process, well under the server's
                # max_connections with two test processes and the direct connections
                "default_pool_size = 12\nmax_db_connections = 12\nmax_client_conn = 500\n"
                "server_idle_timeout = 20\n"
                "ignore_startup_parameters = extra_float_digits\n"
            )
            for path in (users, config):
                path.chmod(0o644)
            log = self.directory / f"pgbouncer-{port}.log"
            command = [found]
            if os.geteuid() == 0:
                command += ["-u", "nobody"]
            with log.open("wb") as out:
                process = subprocess.Popen(
                    [*command, str(config)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and process.poll() is None:
                if port_open("127.0.0.1", port, timeout=0.2):
                    self.process = process
                    return port
                time.sleep(0.05)
            _terminate(process)
            last = log.read_text(errors="replace")[-500:]
        raise RuntimeError(f"pgbouncer did not start: {last}")

    def stop(self) -> None:
        if self.process is not None:
            _terminate(self.process)
            self.process = None
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None


PGBOUNCER = PgBouncerServer()


def pgbouncer_url(postgres_url: str) -> str:
    """``postgres_url`` (a database of :func:`create_postgres_database`) through this
    session's PgBouncer, with ``ratchet_pooler=transaction``; skips (fails with CI=true)
    when pgbouncer is missing or does not start."""
    try:
        port = PGBOUNCER.start()
    except RuntimeError as exc:
        unavailable("pgbouncer", str(exc))
    name = postgres_url.rsplit("/", 1)[1]
    return f"postgresql+psycopg://postgres@127.0.0.1:{port}/{name}?ratchet_pooler=transaction"


def mongo_server_url() -> str:
    """The Mongo server of this session: ``RATCHET_TEST_MONGO_URL``, else the SecantusDB test
    server started for the session (its URL is then exported in ``RATCHET_TEST_MONGO_URL`` so
    that processes the tests spawn use the same server)."""
    given = os.environ.get(MONGO_URL_ENV)
    if given and given != SECANTUS.url:
        return given
    try:
        import pymongo  # noqa: F401
    except ImportError:
        unavailable("MongoDB", "pymongo is not installed")
    try:
        url = SECANTUS.start()
    except RuntimeError as exc:
        unavailable("MongoDB (SecantusDB test server)", str(exc))
    os.environ[MONGO_URL_ENV] = url
    return url


def mongo_database_url() -> str:
    """A ``mongodb://`` URL naming a database unique to this session."""
    import pymongo

    server = mongo_server_url()
    client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(
        server, serverSelectionTimeoutMS=3000
    )
    try:
        client.admin.command("ping")
    except Exception as exc:
        unavailable(
            "MongoDB",
            f"{server} ({MONGO_URL_ENV}) does not answer a ping ({type(exc).__name__}); "
            f"unset {MONGO_URL_ENV} to let the tests start the SecantusDB test server",
        )
    finally:
        client.close()
    base, _, query = server.partition("?")
    base = base.rstrip("/")
    return f"{base}/{_fresh_name()}" + (f"?{query}" if query else "")


def drop_mongo_database(url: str) -> None:
    import pymongo

    client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(url)
    try:
        db = client.get_default_database()
        client.drop_database(db.name)
    finally:
        client.close()


def _wait_until_killed(admin: Any, ids: list[int]) -> None:
    """Wait (at most 5 s) until MariaDB's processlist no longer shows the KILLed ids."""
    import sqlalchemy as sa

    deadline = time.monotonic() + 5
    while ids and time.monotonic() < deadline:
        left = admin.execute(
            sa.text(
                "SELECT count(*) FROM information_schema.processlist WHERE id IN :ids"
            ).bindparams(sa.bindparam("ids", expanding=True)),
            {"ids": ids},
        ).scalar_one()
        if not left:
            return
        time.sleep(0.01)


def kill_database_connections(url: str, backend_pid: int | None = None) -> int:
    """Terminate the server connections to the database of ``url`` (``pg_terminate_backend``
    / MariaDB ``KILL``) from an admin connection, every one but the admin's or only
    ``backend_pid``, and wait until they are gone; returns how many were killed. Crash tests
    use it to drop a worker's or a store's connections for real."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.connect() as admin:
            pg = engine.dialect.name == "postgresql"
            others = (
                "SELECT pid FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                if pg
                else "SELECT id FROM information_schema.processlist"
                " WHERE db = DATABASE() AND id <> CONNECTION_ID()"
            )
            ids = list(admin.execute(sa.text(others)).scalars())
            if backend_pid is not None:
                ids = [pid for pid in ids if pid == backend_pid]
            killed = 0
            for pid in ids:
                if pg:
                    # the timeout makes the call wait until that backend has exited; false when
                    # the backend had already gone
                    killed += bool(
                        admin.execute(
                            sa.text("SELECT pg_terminate_backend(:pid, 5000)"), {"pid": pid}
                        ).scalar()
                    )
                    continue
                try:
                    admin.exec_driver_sql(f"KILL {int(pid)}")
                    killed += 1
                except sa.exc.OperationalError as error:
                    # 1094 Unknown thread id: the connection closed by itself between the
                    # listing and the KILL (a pool recycling it, a process exiting)
                    if error.orig is None or error.orig.args[0] != 1094:
                        raise
            if not pg:
                _wait_until_killed(admin, ids)
            admin.commit()
    finally:
        engine.dispose()
    return killed
