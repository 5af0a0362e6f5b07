"""Real ``ratchet worker`` processes and the execution log they write (see ``targets``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ratchet_api.store.protocols import JobStore

REPO = Path(__file__).resolve().parents[2]
RATCHET = str(Path(sys.executable).with_name("ratchet"))


def start_worker(
    url: str,
    node_id: str,
    cwd: Path,
    concurrency: int = 4,
    *,
    clock_offset: float | None = None,
    **settings: str,
) -> subprocess.Popen[bytes]:
    """A ``ratchet worker`` process; ``clock_offset`` (seconds) shifts its Python clock (see
    ``clockshift``). Its output goes to ``<cwd>/<node_id>.out``."""
    values = {
        "store.url": url,
        "security.allowed_packages": "tests.",
        "node.id": node_id,
        "worker.node_timeout": "2",
        "worker.heartbeat_interval": "0.3",
        "worker.recovery_interval": "0.5",
        "worker.poll_max_interval": "0.1",
        **settings,
    }
    command = [RATCHET]
    if clock_offset is not None:
        command = [sys.executable, "-m", "tests.crash.clockshift", str(clock_offset)]
    for key, value in values.items():
        command += ["--set", f"{key}={value}"]
    command += ["worker", "--no-status", "--log-level", "WARNING", "-c", str(concurrency)]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("RATCHET_CONFIG_FILE", None)
    log = open(cwd / f"{node_id}.out", "wb")  # noqa: SIM115 - closed with the process
    try:
        return subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    finally:
        log.close()


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def wait_for_nodes(store: JobStore, *node_ids: str, timeout: float = 60) -> None:
    """Wait until every worker of ``node_ids`` has registered its node: a test that enqueues
    only then keeps the first worker up from running every job alone."""
    wait_for(
        lambda: set(node_ids) <= {n.node_id for n in store.find_all_nodes()},
        timeout,
        f"workers {', '.join(node_ids)} to start",
    )


def stop_outside_a_write(process: subprocess.Popen[bytes], url: str) -> None:
    """SIGSTOP ``process`` while it holds no open write transaction, which is the stopped node
    a test means to model. Stopped inside one, it would keep its locks: on SQLite the file's
    only write lock, which stalls every other process; on PostgreSQL and MariaDB the rows it
    wrote (a recovery lease, a claim), which a sweep then waits on (PostgreSQL without a
    timeout). So after each stop a probe looks for an open transaction on the database (any
    connection but its own: other live workers' short ones only cost a retry); while there
    is one the process is resumed for 20 ms and stopped again. Other stores: just stopped."""
    import signal

    probe = _open_transaction_probe(url)
    try:
        for _ in range(200):
            process.send_signal(signal.SIGSTOP)
            if probe is None or not probe():
                return
            process.send_signal(signal.SIGCONT)
            time.sleep(0.02)
    finally:
        if probe is not None:
            probe.close()
    raise AssertionError("the worker was inside a write transaction at every stop")


class _SqliteProbe:
    def __init__(self, database: str) -> None:
        self.database = database

    def __call__(self) -> bool:
        import sqlite3

        connection = sqlite3.connect(self.database, timeout=0.2, isolation_level=None)
        try:
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("ROLLBACK")
            return False
        except sqlite3.OperationalError:  # another connection is inside a write
            return True
        finally:
            connection.close()

    def close(self) -> None:
        pass


_OPEN_TRANSACTIONS = {
    "postgresql": "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
    " AND pid <> pg_backend_pid() AND xact_start IS NOT NULL",
    "mysql": "SELECT count(*) FROM information_schema.innodb_trx t"
    " JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id"
    " WHERE p.db = DATABASE() AND p.id <> CONNECTION_ID()",
}


class _ServerProbe:
    def __init__(self, url: str) -> None:
        import sqlalchemy as sa

        self.engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        self.statement = sa.text(_OPEN_TRANSACTIONS[self.engine.dialect.name])

    def __call__(self) -> bool:
        with self.engine.connect() as connection:
            return bool(connection.execute(self.statement).scalar_one())

    def close(self) -> None:
        self.engine.dispose()


def _open_transaction_probe(url: str) -> _SqliteProbe | _ServerProbe | None:
    from ratchet_core.cluster.coordination import sqlite_database

    database = sqlite_database(url)
    if database is not None:
        return _SqliteProbe(database)
    if url.startswith(("postgresql", "mysql", "mariadb")):
        return _ServerProbe(url)
    return None


def kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(10)


@dataclass(frozen=True)
class Execution:
    number: int
    pid: int
    started: float
    outcome: str | None  # "E" succeeded, "F" failed, None: never finished (killed)


def executions(path: Path) -> list[Execution]:
    """Every execution in the log, in start order, matched with its end line (a process runs
    a given job at most once at a time)."""
    if not path.exists():
        return []
    runs: list[Execution] = []
    open_runs: dict[tuple[int, int], int] = {}
    for line in path.read_text(encoding="ascii").splitlines():
        kind, number, pid, at = line.split()
        key = (int(number), int(pid))
        if kind == "S":
            open_runs[key] = len(runs)
            runs.append(Execution(int(number), int(pid), float(at), None))
        elif key in open_runs:
            index = open_runs.pop(key)
            run = runs[index]
            runs[index] = Execution(run.number, run.pid, run.started, kind)
    return runs


def by_job(runs: list[Execution]) -> dict[int, list[Execution]]:
    found: dict[int, list[Execution]] = {}
    for run in runs:
        found.setdefault(run.number, []).append(run)
    return found
