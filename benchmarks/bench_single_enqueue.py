"""Single enqueue only, Ratchet next to its peer, quickly (issue 23).

Usage::

    .venv/bin/python benchmarks/bench_single_enqueue.py --backend sqlite --peers /path/.venv-peers
    .venv/bin/python benchmarks/bench_single_enqueue.py --backend postgresql --rounds 5
    .venv/bin/python benchmarks/bench_single_enqueue.py --backend sqlite --cpu-only --no-peer

Each round enqueues ``--jobs`` no-op jobs one call each with Ratchet (``scheduler.enqueue``, as
``bench_peers.py`` does) and with the peer (Huey 3.5 on SQLite, PgQueuer on PostgreSQL, through
``bench_peers.py``'s own functions), the two taking turns at going first, each in a fresh scratch
database. Printed per side: jobs/s (wall clock), the CPU time this process spent per enqueue
(``time.process_time``: fsync time the kernel charges to the process included), and on SQLite
the WAL frames one Ratchet enqueue writes (counted by ``PRAGMA wal_checkpoint`` over 100
enqueues, page splits included). Medians over ``--rounds`` and the ratio Ratchet/peer.

``--cpu-only`` runs Ratchet with ``synchronous=off`` (SQLite) or ``synchronous_commit=off``
(PostgreSQL) so that only client and database CPU counts; the peer is then left out (its
figures would not be at the same durability). Without it both sides run at the durability
``bench_peers.py`` states: SQLite WAL with ``synchronous=FULL`` on both sides, PostgreSQL at the
server's settings.

An older tree is measured by putting its sources first on ``PYTHONPATH`` (see the README's
"before" recipe); the benchmark's own helpers come from this checkout.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_engine
import bench_peers
from bench_engine import load, rate

from tests.engine import targets


def ratchet_side(backend: str, jobs: int, cpu_only: bool) -> tuple[float, float, float | None]:
    """(jobs/s, CPU µs per enqueue, WAL frames per enqueue on SQLite)."""
    with bench_engine.scratch(backend) as scratch_url:
        url = scratch_url
        if cpu_only:
            url += (
                "?synchronous=off" if backend == "sqlite" else "?options=-csynchronous_commit%3Doff"
            )
        c = bench_engine.container(url)
        scheduler = c.scheduler()
        scheduler.enqueue(targets.noop)  # warm up (imports, connection, target)
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(jobs):
            scheduler.enqueue(targets.noop)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        frames = wal_frames(url, scheduler) if backend == "sqlite" else None
        c.job_store().close()
    return rate(jobs, wall), cpu / jobs * 1e6, frames


def wal_frames(url: str, scheduler: object, windows: int = 5, count: int = 100) -> float:
    """WAL frames per enqueue, the mean over ``windows`` runs of ``count`` enqueues (each
    below the 1,000-frame automatic checkpoint; page splits included)."""
    path = url.removeprefix("sqlite:///").split("?", 1)[0]
    other = sqlite3.connect(path)
    frames = 0
    try:
        for _ in range(windows):
            other.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            for _ in range(count):
                scheduler.enqueue(targets.noop)  # type: ignore[attr-defined]
            _busy, log, _done = other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            frames += log
    finally:
        other.close()
    return frames / (windows * count)


def peer_side(backend: str, jobs: int) -> tuple[float, float]:
    """(jobs/s, CPU µs per enqueue of the whole call; PgQueuer's includes its bulk figure)."""
    cpu = time.process_time()
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            single = bench_peers.huey_enqueue(Path(tmp) / "huey.db", jobs)
    else:
        with bench_peers.postgres_database() as (_url, dsn):
            single = bench_peers.pgq_enqueue(dsn, jobs)[0]
    return single, (time.process_time() - cpu) / jobs * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cpu-only", action="store_true", help="Ratchet at synchronous off")
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument("--peers", default=str(bench_peers.PEERS))
    args = parser.parse_args(argv)
    with_peer = not (args.no_peer or args.cpu_only)
    if with_peer:
        bench_peers.use_peers(Path(args.peers).resolve())
    peer = "Huey" if args.backend == "sqlite" else "PgQueuer"
    print(f"load average before: {load()}; {args.jobs} jobs, {args.rounds} round(s)")
    ours: list[tuple[float, float, float | None]] = []
    theirs: list[tuple[float, float]] = []
    for index in range(args.rounds):
        order = ["ratchet", "peer"] if index % 2 == 0 else ["peer", "ratchet"]
        for side in order:
            if side == "ratchet":
                ours.append(ratchet_side(args.backend, args.jobs, args.cpu_only))
                print(f"  Ratchet {ours[-1][0]:,.0f} jobs/s, {ours[-1][1]:.0f} µs CPU", flush=True)
            elif with_peer:
                theirs.append(peer_side(args.backend, args.jobs))
                print(
                    f"  {peer} {theirs[-1][0]:,.0f} jobs/s, {theirs[-1][1]:.0f} µs CPU", flush=True
                )
    rate_ours = statistics.median(r[0] for r in ours)
    print(
        f"\n{args.backend}{' (CPU only)' if args.cpu_only else ''}: Ratchet single enqueue "
        f"{rate_ours:,.0f} jobs/s, {statistics.median(r[1] for r in ours):.0f} µs CPU each"
    )
    frames = [r[2] for r in ours if r[2] is not None]
    if frames:
        print(f"Ratchet WAL frames per enqueue: {statistics.median(frames):.2f}")
    if theirs:
        rate_theirs = statistics.median(r[0] for r in theirs)
        ratios = [o[0] / t[0] for o, t in zip(ours, theirs, strict=True)]
        print(
            f"{peer} single enqueue {rate_theirs:,.0f} jobs/s, "
            f"{statistics.median(r[1] for r in theirs):.0f} µs CPU each; ratio Ratchet/{peer} "
            f"{rate_ours / rate_theirs:.2f} (each round: "
            f"{', '.join(f'{r:.2f}' for r in ratios)})"
        )
        print(bench_peers.durability(args.backend))
    print(f"load average after: {load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
