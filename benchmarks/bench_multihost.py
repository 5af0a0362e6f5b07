"""Workers on other hosts: 8 worker processes in network namespaces, one PostgreSQL, a pooler.

Root only (it creates network namespaces); a benchmark, never a test: no figure is asserted.

    sudo .venv/bin/python benchmarks/bench_multihost.py            # RTT 0, 2 and 10 ms
    sudo .venv/bin/python benchmarks/bench_multihost.py --rtt 0 2 --jobs 20000 --samples 200

Topology. ``--hosts`` network namespaces (default 2) stand for the worker hosts, each joined to
the database host (the root namespace) by a veth pair with addresses in 10.213.<n>.0/30, used
by nothing else. PgBouncer (Debian's ``pgbouncer``, transaction pooling) runs in the root
namespace in front of the local PostgreSQL (127.0.0.1:5432). Each host's workers reach it at
their veth pair's root-side address; the store URL carries ``ratchet_pooler=transaction`` and
``cluster.url`` names a session-mode alias of the same database in the same PgBouncer (for
LISTEN). The round trip time between a worker host and the database host is set by ``tc
netem`` (half of it on each end of the veth pair); where the kernel has no ``sch_netem`` (this
VM's has not) the benchmark instead starts its own delaying TCP forwarder on the veth
addresses, which holds every chunk of bytes for half the RTT in each direction before passing
it on to PgBouncer (the 0 ms row goes through the same forwarder, so rows compare like with
like). Everything it creates (namespaces, veth pairs, PgBouncer, forwarder, workers, the scratch
database) is removed on exit, also on Ctrl-C or SIGTERM.

Per RTT: 8 ``ratchet worker`` processes (``--workers``) are spread over the hosts and started;
once every one has registered its node, ``--jobs`` no-op jobs are bulk-enqueued from the
database host (direct connection) and the throughput is jobs / (last ``finished_at`` - first
``started_at``). Then ``--samples`` single jobs are enqueued one at a time into the idle
workers and their enqueue-to-start latency (``started_at - created_at``, both the server's
clock) is reported as p50/p99: a wake-up (the database's insert trigger, heard through the
delayed session connection) and a claim (one round trip). A ``direct`` row runs the same
workers in the root namespace straight on 127.0.0.1:5432 (no pooler, no veth) for reference.
``--repeats`` rounds go over every row in turn (so that the shared machine's changing load falls
on every row alike); the table gives each row's median throughput with every round's figure, and
the latency percentiles over the samples of all rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

RATCHET = str(Path(sys.executable).with_name("ratchet"))
PG_HOST, PG_PORT = "127.0.0.1", 5432
SUBNET = "10.213"
WORKER_SETTINGS = {
    "security.allowed_packages": "tests.",
    "worker.claim_batch_size": "200",
    "worker.completion_batch_size": "1000",
}


def run(*command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, check=check)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


# ---------------------------------------------------------------- the hosts


@dataclass
class Host:
    namespace: str
    outside: str  # veth end in the root namespace (the database host)
    inside: str  # veth end in the namespace
    host_address: str  # the root side's address: where the workers reach the database
    worker_address: str


class Network:
    """Namespaces joined to the root namespace by veth pairs; ``destroy`` removes them (the
    veth pair goes with its namespace end)."""

    def __init__(self, hosts: int) -> None:
        tag = f"{os.getpid() % 100_000}"
        self.hosts = [
            Host(
                namespace=f"ratchet-mh-{tag}-{n}",
                outside=f"rmh{tag}o{n}",
                inside=f"rmh{tag}i{n}",
                host_address=f"{SUBNET}.{n + 1}.1",
                worker_address=f"{SUBNET}.{n + 1}.2",
            )
            for n in range(hosts)
        ]
        self.created: list[Host] = []
        self.netem = False

    def create(self) -> None:
        for host in self.hosts:
            run("ip", "netns", "add", host.namespace)
            self.created.append(host)
            run("ip", "link", "add", host.outside, "type", "veth", "peer", "name", host.inside)
            run("ip", "link", "set", host.inside, "netns", host.namespace)
            run("ip", "addr", "add", f"{host.host_address}/30", "dev", host.outside)
            run("ip", "link", "set", host.outside, "up")
            inside = ("ip", "netns", "exec", host.namespace)
            run(*inside, "ip", "addr", "add", f"{host.worker_address}/30", "dev", host.inside)
            run(*inside, "ip", "link", "set", host.inside, "up")
            run(*inside, "ip", "link", "set", "lo", "up")
        first = self.hosts[0]
        probe = run(
            "tc", "qdisc", "add", "dev", first.outside, "root", "netem", "delay", "0ms", check=False
        )
        self.netem = probe.returncode == 0
        if self.netem:
            run("tc", "qdisc", "del", "dev", first.outside, "root")

    def set_rtt(self, rtt_ms: float) -> None:
        """Half the round trip on each end of every veth pair (netem only)."""
        one_way = f"{rtt_ms / 2:g}ms"
        for host in self.hosts:
            run("tc", "qdisc", "replace", "dev", host.outside, "root", "netem", "delay", one_way)
            run(
                "ip",
                "netns",
                "exec",
                host.namespace,
                "tc",
                "qdisc",
                "replace",
                "dev",
                host.inside,
                "root",
                "netem",
                "delay",
                one_way,
            )

    def destroy(self) -> None:
        for host in self.created:
            run("ip", "netns", "del", host.namespace, check=False)
            run("ip", "link", "del", host.outside, check=False)  # gone with the namespace
        self.created.clear()


# ---------------------------------------------------------------- PgBouncer and the forwarder


class PgBouncer:
    """Transaction pooling for ``database``; ``<database>_session`` is the same database in
    session mode (for the workers' LISTEN)."""

    def __init__(self, database: str, addresses: list[str]) -> None:
        found = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not Path(found).exists():
            raise SystemExit("pgbouncer is not installed (apt-get install pgbouncer)")
        self.directory = Path(tempfile.mkdtemp(prefix="ratchet-mh-pgbouncer-"))
        self.directory.chmod(0o755)  # PgBouncer runs as nobody (it refuses root)
        self.port = free_port()
        users = self.directory / "users.txt"
        users.write_text('"postgres" ""\n')
        config = self.directory / "pgbouncer.ini"
        config.write_text(
            "[databases]\n"
            f"{database} = host={PG_HOST} port={PG_PORT} dbname={database}\n"
            f"{database}_session = host={PG_HOST} port={PG_PORT} dbname={database}"
            " pool_mode=session\n"
            "[pgbouncer]\n"
            f"listen_addr = {','.join(addresses)}\nlisten_port = {self.port}\n"
            "unix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {users}\npool_mode = transaction\n"
            "default_pool_size = 20\nmax_client_conn = 1000\n"
            "ignore_startup_parameters = extra_float_digits\n"
        )
        for path in (users, config):
            path.chmod(0o644)
        command = [found, *(["-u", "nobody"] if os.geteuid() == 0 else []), str(config)]
        self.log = (self.directory / "pgbouncer.log").open("wb")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        wait_listening(addresses[0], self.port, self.process, "pgbouncer")

    def stop(self) -> None:
        stop_process(self.process)
        self.log.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def wait_listening(address: str, port: int, process: subprocess.Popen[Any], name: str) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{name} exited with {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection((address, port), 0.2):
            return
        time.sleep(0.05)
    raise SystemExit(f"{name} did not listen on {address}:{port}")


def stop_process(
    process: subprocess.Popen[Any], timeout: float = 30, terminate: bool = True
) -> None:
    """Stop ``process`` (SIGTERM unless ``terminate`` is false because it was sent already; a
    second SIGTERM makes a worker exit without waiting for its jobs), kill it after
    ``timeout``."""
    if process.poll() is None:
        if terminate:
            process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy ``reader`` to ``writer``, each chunk ``delay`` seconds after it was read (a
    one-way latency: chunks keep their order and do not wait for each other)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, chunk = await queue.get()
            if not chunk:
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(chunk)
            await writer.drain()
        with contextlib.suppress(OSError):
            writer.write_eof()

    sender = asyncio.create_task(deliver())
    try:
        while chunk := await reader.read(65536):
            queue.put_nowait((loop.time() + delay, chunk))
    except OSError:
        pass
    queue.put_nowait((0.0, b""))
    with contextlib.suppress(OSError):
        await sender


async def _forward(addresses: list[str], port: int, target: int, delay: float) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            writer.close()
            return
        up_writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(_pipe(reader, up_writer, delay), _pipe(up_reader, writer, delay))
        for w in (writer, up_writer):
            w.close()

    servers = [await asyncio.start_server(handle, address, port) for address in addresses]
    await asyncio.gather(*(server.serve_forever() for server in servers))


class Forwarder:
    """This script in ``--forward`` mode: listens on the veth addresses, delays, and passes
    every connection on to PgBouncer on 127.0.0.1."""

    def __init__(self, addresses: list[str], target: int, rtt_ms: float) -> None:
        self.port = free_port()
        command = [
            sys.executable,
            __file__,
            "--forward",
            ",".join(addresses),
            str(self.port),
            str(target),
            str(rtt_ms / 2000),
        ]
        self.process = subprocess.Popen(command)
        wait_listening(addresses[0], self.port, self.process, "the forwarder")

    def stop(self) -> None:
        stop_process(self.process)


# ---------------------------------------------------------------- workers and measurements


def scratch_database() -> str:
    import psycopg

    name = f"ratchet_mh_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(host=PG_HOST, port=PG_PORT, user="postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def drop_database(name: str) -> None:
    import psycopg

    with psycopg.connect(host=PG_HOST, port=PG_PORT, user="postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def start_worker(namespace: str | None, settings: dict[str, str], concurrency: int) -> Any:
    command = [] if namespace is None else ["ip", "netns", "exec", namespace]
    command.append(RATCHET)
    for key, value in {**WORKER_SETTINGS, **settings}.items():
        command += ["--set", f"{key}={value}"]
    command += ["worker", "--no-status", "--log-level", "WARNING", "-c", str(concurrency)]
    command += ["--prefetch", str(max(concurrency, 64))]
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path)
    # stdout carries each worker's stop summary only; warnings and errors go to stderr
    return subprocess.Popen(command, env=env, cwd=tempfile.gettempdir(), stdout=subprocess.DEVNULL)


def scalar(engine: Any, sql: str) -> Any:
    import sqlalchemy as sa

    with engine.connect() as conn:
        return conn.execute(sa.text(sql)).scalar()


def execute(engine: Any, sql: str) -> None:
    import sqlalchemy as sa

    with engine.begin() as conn:
        conn.execute(sa.text(sql))


def wait_until(check: Any, timeout: float, what: str, processes: list[Any]) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if any(p.poll() is not None for p in processes):
            raise SystemExit(f"a worker exited while waiting for {what}")
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


def measure(
    label: str,
    direct_url: str,
    placements: list[tuple[str | None, dict[str, str]]],
    jobs: int,
    samples: int,
    concurrency: int,
) -> tuple[float, list[float]]:
    """Throughput of ``jobs`` bulk-enqueued no-ops, then enqueue-to-start of ``samples`` single
    jobs, with one worker per placement (namespace, settings)."""
    from ratchet_api.model import JobStatus
    from ratchet_core.runtime.container import RatchetContainer
    from tests.engine import targets

    producer = RatchetContainer(
        overrides={
            "store.url": direct_url,
            "security.allowed_packages": "tests.",
            "cluster.backend": "none",  # the database's trigger wakes the workers
        }
    )
    scheduler, store = producer.scheduler(), producer.job_store()
    engine = store.engine  # type: ignore[attr-defined]
    for table in ("ratchet_executions", "ratchet_jobs", "ratchet_nodes"):
        execute(engine, f"DELETE FROM {table}")
    workers = [start_worker(ns, settings, concurrency) for ns, settings in placements]
    try:
        wait_until(
            lambda: scalar(engine, "SELECT count(*) FROM ratchet_nodes") >= len(workers),
            60,
            "every worker's node",
            workers,
        )
        time.sleep(1.0)  # every worker past its first polls: idle, listening
        scheduler.enqueue_many(targets.noop, [() for _ in range(jobs)])
        wait_until(
            lambda: (
                scalar(engine, "SELECT count(*) FROM ratchet_jobs WHERE status='SUCCEEDED'") >= jobs
            ),
            600,
            f"{jobs} jobs",
            workers,
        )
        seconds = scalar(
            engine,
            "SELECT extract(epoch FROM max(finished_at) - min(started_at))"
            " FROM ratchet_jobs WHERE status = 'SUCCEEDED'",
        )
        throughput = jobs / float(seconds)
        execute(engine, "DELETE FROM ratchet_executions")
        execute(engine, "DELETE FROM ratchet_jobs")
        latencies: list[float] = []
        for _ in range(samples):
            job_id = scheduler.enqueue(targets.noop)
            deadline = time.monotonic() + 30
            while True:
                job = store.find_by_id(job_id)
                if job is not None and job.status is JobStatus.SUCCEEDED:
                    break
                if time.monotonic() > deadline:
                    raise SystemExit("a single job did not run within 30 s")
                time.sleep(0.002)
            assert job.started_at is not None
            latencies.append((job.started_at - job.created_at).total_seconds() * 1000)
            time.sleep(0.05)
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            stop_process(worker, terminate=False)
        producer.shutdown_resources()
        store.close()
    print(
        f"{label:>12}: {throughput:8,.0f} jobs/s   enqueue-to-start p50 "
        f"{statistics.median(latencies):6.1f} ms  p99 {percentile(latencies, 0.99):6.1f} ms",
        flush=True,
    )
    return throughput, latencies


@contextlib.contextmanager
def cleanup_on_signals() -> Iterator[None]:
    """SIGTERM/SIGHUP end the run like Ctrl-C, so that the ``finally`` blocks remove
    everything."""

    def stop(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rtt", type=float, nargs="+", default=[0.0, 2.0, 10.0])
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=8, help="per worker process")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3, help="rounds over every row")
    parser.add_argument("--no-direct", action="store_true", help="skip the direct row")
    parser.add_argument("--forward", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.forward:
        addresses, port, target, delay = args.forward
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_forward(addresses.split(","), int(port), int(target), float(delay)))
        return 0
    if os.geteuid() != 0:
        print("bench_multihost.py creates network namespaces: run it as root", file=sys.stderr)
        return 2

    from ratchet_store_sql import migrate

    network = Network(args.hosts)
    database = scratch_database()
    bouncer: PgBouncer | None = None
    forwarder: Forwarder | None = None
    throughputs: dict[str, list[float]] = {}
    latencies: dict[str, list[float]] = {}
    direct_url = f"postgresql+psycopg://postgres@{PG_HOST}:{PG_PORT}/{database}"

    def record(label: str, placements: list[tuple[str | None, dict[str, str]]]) -> None:
        rate, waits = measure(
            label, direct_url, placements, args.jobs, args.samples, args.concurrency
        )
        throughputs.setdefault(label, []).append(rate)
        latencies.setdefault(label, []).extend(waits)

    try:
        with cleanup_on_signals():
            migrate(direct_url)
            network.create()
            print(
                f"{args.workers} workers (-c {args.concurrency}) on {args.hosts} hosts, "
                f"{args.jobs:,} jobs, {args.samples} latency samples, {args.repeats} rounds; "
                "delay by "
                f"{'tc netem' if network.netem else 'the forwarder (no sch_netem in this kernel)'}"
                f"; load {' '.join(f'{v:.2f}' for v in os.getloadavg())}",
                flush=True,
            )
            addresses = [h.host_address for h in network.hosts]
            bouncer = PgBouncer(database, ["127.0.0.1"] if not network.netem else addresses)
            # rounds interleave the rows, so that a change of the shared machine's load
            # during the run falls on every row alike
            for _ in range(args.repeats):
                if not args.no_direct:
                    record("direct", [(None, {"store.url": direct_url})] * args.workers)
                for rtt in args.rtt:
                    port = bouncer.port
                    if network.netem:
                        network.set_rtt(rtt)
                    else:
                        forwarder = Forwarder(addresses, bouncer.port, rtt)
                        port = forwarder.port
                    placements: list[tuple[str | None, dict[str, str]]] = []
                    for n in range(args.workers):
                        host = network.hosts[n % len(network.hosts)]
                        base = f"postgresql+psycopg://postgres@{host.host_address}:{port}"
                        store_url = f"{base}/{database}?ratchet_pooler=transaction"
                        settings = {
                            "store.url": store_url,
                            "cluster.url": f"{base}/{database}_session",
                        }
                        placements.append((host.namespace, settings))
                    try:
                        record(f"RTT {rtt:g} ms", placements)
                    finally:
                        if forwarder is not None:
                            forwarder.stop()
                            forwarder = None
    except KeyboardInterrupt:
        print("interrupted: cleaning up", file=sys.stderr)
        return 1
    finally:
        if forwarder is not None:
            forwarder.stop()
        if bouncer is not None:
            bouncer.stop()
        network.destroy()
        drop_database(database)
    local = statistics.median(throughputs.get("RTT 0 ms", [0.0])) or None
    print(f"\nload {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print("| workers reach the database | jobs/s (median; rounds) | vs RTT 0 | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|---:|")
    for label, rates in throughputs.items():
        median = statistics.median(rates)
        share = f"{median / local:.0%}" if local else ""
        each = ", ".join(f"{r:,.0f}" for r in rates)
        waits = latencies[label]
        print(
            f"| {label} | {median:,.0f} ({each}) | {share} | {statistics.median(waits):.1f} "
            f"| {percentile(waits, 0.99):.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
