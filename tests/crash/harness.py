"""Real ``ratchet worker`` processes and the execution log they write (see ``targets``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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


def stop_outside_a_write(process: subprocess.Popen[bytes], url: str) -> None:
    """SIGSTOP ``process``. On SQLite the whole file has one writer: a worker stopped inside a
    write transaction (a heartbeat, a claim, a started mark) would hold the write lock, and
    every other process would wait on it, which is not the stopped node a test means to
    model. There it is resumed and stopped again until it holds no write lock."""
    import signal
    import sqlite3

    from ratchet_core.cluster import sqlite_database

    database = sqlite_database(url)
    for _ in range(100):
        process.send_signal(signal.SIGSTOP)
        if database is None:
            return
        probe = sqlite3.connect(database, timeout=0.2, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:  # stopped inside a write: try again
            process.send_signal(signal.SIGCONT)
            time.sleep(0.02)
        finally:
            probe.close()
    raise AssertionError("the worker was inside a write transaction at every stop")


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
