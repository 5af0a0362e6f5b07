"""The floors under issue 23's three unmet targets, next to the peers, in one run.

Usage::

    .venv/bin/python benchmarks/bench_floors.py                   # both parts
    .venv/bin/python benchmarks/bench_floors.py --only imports    # RSS and start-up floor
    .venv/bin/python benchmarks/bench_floors.py --only sqlite     # SQLite single-enqueue floor

The peers come from ``.venv-peers`` (``benchmarks/requirements-bench.txt``; nothing is installed
at run time), as in ``bench_peers.py``.

**imports**: a fresh interpreter per run, interleaved ``--runs`` times, medians. Each prints
its own ``VmHWM`` (peak resident set: it is per address space, so the parent's size does not
carry over ``exec``); wall time is spawn to exit, CPU is the child's user + system time
(``os.wait4``). The rows:

* PgQueuer's worker imports (``asyncpg``, ``pgqueuer``), in the peers' interpreter;
* SQLAlchemy, its psycopg dialect and psycopg: Ratchet's data layer, not one Ratchet module;
* the same and the other libraries Ratchet builds on (dependency-injector, cattrs, attrs, loguru,
  click), still no Ratchet module (the frameworks ``ratchet_core.runtime._lean`` hides from
  dependency-injector hidden the same way);
* SQLAlchemy, psycopg and Ratchet's PostgreSQL worker modules (``ratchet_core.cli.worker``, the
  store);
* each system's whole worker on an empty queue of a scratch PostgreSQL database, until it
  exits (PgQueuer's ``drain`` mode, ``ratchet worker --burst``), its ``VmHWM`` polled; PgQueuer
  both as ``bench_peers.py`` runs it (``peer_pgqueuer.py``: its queue manager, no CLI) and
  through its own command line (``pgq run``, as Ratchet's runs through ``ratchet worker``).

**sqlite**: per-call wall and CPU time (``time.process_time``) of one enqueue at SQLite's
``synchronous=FULL`` in WAL mode (both systems' default), ``--calls`` calls per row,
interleaved ``--runs`` times, medians, each row in its own file in one directory:

* Huey's enqueue (a ``SqliteHuey`` task call);
* a raw sqlite3 insert of one Huey row (Huey's statement: ``begin exclusive``, ``insert into
  task``, ``commit``) into Huey's schema;
* a raw sqlite3 insert of one Ratchet job row (``BEGIN IMMEDIATE``, the ``INSERT`` and row of
  ``COMMIT``, no Ratchet code) into Ratchet's migrated schema, and into the same table without
  its secondary indexes;
* Ratchet's ``scheduler.enqueue``.

Nothing is asserted; the figures go to ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_engine  # noqa: E402
import bench_peers  # noqa: E402
import bench_sqlite_row_indexes as row_indexes  # noqa: E402

from tests.engine import targets  # noqa: E402

_PEAK = (
    "\nwith open('/proc/self/status', encoding='ascii') as s:\n"
    "    print([int(l.split()[1]) for l in s if l.startswith('VmHWM:')][0] / 1024)\n"
)
_HIDE_UNUSED = (
    "import importlib.abc, sys\n"
    "class Hide(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.partition('.')[0] in {'fastapi', 'fast_depends', 'starlette', 'werkzeug',"
    " 'pydantic'}:\n"
    "            raise ModuleNotFoundError(name)\n"
    "sys.meta_path.insert(0, Hide())\n"
)
"""What ``ratchet_core.runtime._lean`` does before dependency-injector is imported: the web
frameworks (and pydantic) its optional integrations would import are hidden."""
_HUEY_SCHEMA = (
    "create table task (id integer not null primary key, queue text not null, "
    "data blob not null, priority real not null default 0.0)",
    "create index task_queue_priority_id on task (queue, priority desc, id)",
)
"""Huey's task table and its index (``huey.storage.SqliteStorage``)."""
_HUEY_INSERT = "insert into task (queue, data, priority) values (?, ?, ?)"
IMPORT_SETS = {
    "PgQueuer worker imports (asyncpg, pgqueuer)": ("peers", "import asyncpg, pgqueuer"),
    "SQLAlchemy + psycopg dialect + psycopg": (
        "ratchet",
        "import sqlalchemy, sqlalchemy.dialects.postgresql.psycopg, psycopg",
    ),
    "the above + the other libraries Ratchet builds on (dependency-injector, cattrs, attrs,"
    " loguru, click), no Ratchet module": (
        "ratchet",
        _HIDE_UNUSED + "import sqlalchemy, sqlalchemy.dialects.postgresql.psycopg, psycopg,"
        " dependency_injector.containers, dependency_injector.providers, cattrs, attrs, loguru,"
        " click",
    ),
    "SQLAlchemy + psycopg + Ratchet's worker modules": (
        "ratchet",
        "import sqlalchemy.dialects.postgresql.psycopg, psycopg, ratchet_store_sql.store,"
        " ratchet_core.cli.worker",
    ),
}


def _python(side: str) -> str:
    return str(bench_peers.PEERS / "bin" / "python") if side == "peers" else sys.executable


def _timed(command: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall s, child CPU s, stdout) of one process run to its end."""
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, cwd=tempfile.gettempdir(), stdout=subprocess.PIPE)
    assert process.stdout is not None
    out = process.stdout.read().decode()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise RuntimeError(f"{command[:3]} exited with {process.returncode}")
    return time.perf_counter() - started, usage.ru_utime + usage.ru_stime, out


def _whole_worker(spawn: Callable[[], subprocess.Popen[bytes]]) -> tuple[float, float]:
    """(wall s, peak RSS MiB) of a worker run on an empty queue until it exits."""
    started = time.perf_counter()
    process = spawn()
    peak = 0.0
    while process.poll() is None:
        peak = max(peak, bench_peers.peak_rss_mib(process.pid))
        time.sleep(0.005)
    if process.returncode:
        raise RuntimeError(f"worker exited with {process.returncode}")
    return time.perf_counter() - started, peak


def _pgq_cli(dsn: str) -> subprocess.Popen[bytes]:
    """PgQueuer's worker as its users start it: its own command line."""
    command = [str(bench_peers.PEERS / "bin" / "pgq"), "--pg-dsn", dsn, "run"]
    command += ["benchmarks.peer_pgqueuer:factory", "--mode", "drain", "--log-level", "WARNING"]
    env = dict(os.environ, PYTHONPATH=str(REPO), RATCHET_BENCH_PGQ_DSN=dsn)
    return subprocess.Popen(command, env=env, cwd=str(REPO))


def imports_part(runs: int) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    rows: dict[str, list[tuple[float, float, float]]] = {}
    with bench_engine.scratch("postgresql") as url:
        dsn = url.replace("postgresql+psycopg://", "postgresql://")
        bench_peers.pgq_install(dsn)
        workers: dict[str, Callable[[], subprocess.Popen[bytes]]] = {
            "PgQueuer's whole worker, empty queue (drain)": lambda: bench_peers.pgq_spawn(
                dsn, "drain", 10
            ),
            "PgQueuer's whole worker through its CLI (pgq run, drain), empty queue": lambda: (
                _pgq_cli(dsn)
            ),
            "Ratchet's whole worker, empty queue (--burst)": lambda: bench_engine.worker_process(
                url, "--burst", "-c", "16", "--prefetch", "64", **bench_peers.RATCHET_WORKER
            ),
        }
        for _ in range(runs):
            for label, (side, code) in IMPORT_SETS.items():
                wall, cpu, out = _timed([_python(side), "-c", code + _PEAK], env)
                rows.setdefault(label, []).append((wall, cpu, float(out.split()[-1])))
            for label, spawn in workers.items():
                wall, peak = _whole_worker(spawn)
                rows.setdefault(label, []).append((wall, float("nan"), peak))
    print("\n| process | peak RSS (MiB) | wall (s) | CPU (s) |")
    print("|---|---:|---:|---:|")
    for label, values in rows.items():
        wall, cpu, peak = (statistics.median(v[i] for v in values) for i in range(3))
        cpu_text = "" if cpu != cpu else f"{cpu:.2f}"  # NaN: not measured
        print(f"| {label} | {peak:.1f} | {wall:.2f} | {cpu_text} |")


def _per_call(calls: int, action: Callable[[], object]) -> tuple[float, float]:
    """(wall µs, CPU µs) per call of ``action``."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        action()
    return (
        (time.perf_counter() - wall) / calls * 1e6,
        (time.process_time() - cpu) / calls * 1e6,
    )


def sqlite_part(runs: int, calls: int) -> None:
    rows: dict[str, list[tuple[float, float]]] = {}
    with bench_engine.scratch("sqlite") as url, tempfile.TemporaryDirectory() as tmp:
        c = bench_engine.container(url)
        scheduler = c.scheduler()
        # the migrated table and indexes, and the job row, of bench_sqlite_row_indexes.py
        table, indexes = row_indexes.schema(Path(tmp))

        huey = bench_peers.huey_module(Path(tmp) / "huey.db")
        huey.noop()
        blob = huey.huey.storage.dequeue()  # one message as Huey stores it

        def created(name: str, *ddl: str) -> sqlite3.Connection:
            conn = sqlite3.connect(Path(tmp) / name, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            for sql in ddl:
                conn.execute(sql)
            return conn

        huey_raw = created("huey-raw.db", *_HUEY_SCHEMA)

        def huey_row() -> None:
            huey_raw.execute("begin exclusive")
            huey_raw.execute(_HUEY_INSERT, ("bench", blob, 0))
            huey_raw.execute("commit")

        def job_row(conn: sqlite3.Connection) -> Callable[[], None]:
            def insert() -> None:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(row_indexes.INSERT, row_indexes.job_row())
                conn.execute("COMMIT")

            return insert

        indexed = created("ratchet-raw.db", table, *indexes)
        bare = created("ratchet-bare.db", table)
        actions: dict[str, Callable[[], object]] = {
            "Huey enqueue": huey.noop,
            "raw sqlite3: one Huey row": huey_row,
            "raw sqlite3: one Ratchet job row": job_row(indexed),
            "raw sqlite3: the same row, no secondary index": job_row(bare),
            "Ratchet enqueue": lambda: scheduler.enqueue(targets.noop),
        }
        for action in actions.values():
            action()  # warm up
        for _ in range(runs):
            for label, action in actions.items():
                rows.setdefault(label, []).append(_per_call(calls, action))
        for conn in (huey_raw, indexed, bare):
            conn.close()
        huey.huey.flush()
        c.job_store().close()
    huey_wall = statistics.median(w for w, _ in rows["Huey enqueue"])
    print(
        f"\n| one call, synchronous=FULL, WAL ({calls} calls x {runs}) | wall (µs) | CPU (µs) "
        "| Huey enqueue / this (jobs/s ratio) |"
    )
    print("|---|---:|---:|---:|")
    for label, values in rows.items():
        wall = statistics.median(w for w, _ in values)
        cpu = statistics.median(c for _, c in values)
        print(f"| {label} | {wall:.0f} | {cpu:.0f} | {huey_wall / wall:.2f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["imports", "sqlite"])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2_000, help="sqlite: calls per row per run")
    parser.add_argument("--peers", type=Path, default=bench_peers.PEERS)
    args = parser.parse_args(argv)
    bench_peers.use_peers(args.peers)
    print(f"load average before: {bench_engine.load()}")
    if args.only in (None, "imports"):
        imports_part(args.runs)
    if args.only in (None, "sqlite"):
        sqlite_part(args.runs, args.calls)
    print(f"load average after: {bench_engine.load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
