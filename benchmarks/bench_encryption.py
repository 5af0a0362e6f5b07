"""Encryption benchmark: enqueue and processing throughput with payload encryption off and on
(the ratio is the cost of encryption), and the time ``ratchet keys rotate`` takes.

Usage::

    .venv/bin/python benchmarks/bench_encryption.py --backend all --jobs 10000

Each figure uses a fresh scratch database (see ``bench_engine.py``). The job is
``tests.engine.targets.echo_any`` with a ~200-byte dict argument that it returns, so with
encryption on the payload and the result are both sealed (AES-256-GCM). Figures:

* enqueue single / bulk: ``scheduler.enqueue`` per job, ``scheduler.enqueue_many`` of all;
* processing c=16: one ``ratchet worker --burst`` process (as in bench_engine.py);
* rotate: re-encrypting every payload and result under a new key with
  ``ratchet_core.payload.rotation.rotate`` (batches of 500), in process.
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.engine import targets  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "bench_engine", REPO / "benchmarks" / "bench_engine.py"
)
assert _spec is not None and _spec.loader is not None
engine = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(engine)

ARGUMENT = {"order": 12345, "customer": "ada@example.com", "items": [f"sku-{i}" for i in range(12)]}


def key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def bench_enqueue(url: str, jobs: int, settings: dict[str, str]) -> tuple[float, float]:
    c = engine.container(url, **settings)
    scheduler, store = c.scheduler(), c.job_store()
    scheduler.enqueue(targets.echo_any, ARGUMENT)
    started = time.perf_counter()
    for _ in range(jobs):
        scheduler.enqueue(targets.echo_any, ARGUMENT)
    single = engine.rate(jobs, time.perf_counter() - started)
    started = time.perf_counter()
    scheduler.enqueue_many(targets.echo_any, [(ARGUMENT,) for _ in range(jobs)])
    bulk = engine.rate(jobs, time.perf_counter() - started)
    store.close()
    return single, bulk


def bench_processing(url: str, jobs: int, settings: dict[str, str]) -> float:
    from ratchet_api.model import JobStatus
    from ratchet_api.store.entities import JobQuery

    c = engine.container(url, **settings)
    scheduler, store = c.scheduler(), c.job_store()
    scheduler.enqueue_many(targets.echo_any, [(ARGUMENT,) for _ in range(jobs)])
    process = engine.worker_process(
        url,
        "--burst",
        "-c",
        "16",
        "--prefetch",
        "64",
        **{"worker.claim_batch_size": "200", "worker.completion_batch_size": "1000", **settings},
    )
    if process.wait(600) != 0:
        raise RuntimeError(f"worker exited with {process.returncode}")
    done = store.search_jobs(JobQuery(limit=jobs, statuses=frozenset({JobStatus.SUCCEEDED})))
    if len(done) != jobs:
        raise RuntimeError(f"only {len(done)} of {jobs} jobs succeeded")
    first = min(j.started_at for j in done if j.started_at is not None)
    last = max(j.finished_at for j in done if j.finished_at is not None)
    store.close()
    return float(engine.rate(jobs, (last - first).total_seconds()))


def bench_rotate(url: str, jobs: int) -> float:
    from ratchet_core.payload.rotation import rotate

    old, new = f"old:{key()}", f"new:{key()}"
    before = engine.container(url, **{"encryption.keys": old})
    before.scheduler().enqueue_many(targets.echo_any, [(ARGUMENT,) for _ in range(jobs)])
    during = engine.container(
        url, **{"encryption.keys": f"{old},{new}", "encryption.current_key_id": "new"}
    )
    started = time.perf_counter()
    report = rotate(during.job_store(), during.payload_codec(), batch_size=500)
    elapsed = time.perf_counter() - started
    if report.rewritten != jobs:
        raise RuntimeError(f"rotated {report.rewritten} of {jobs}")
    return elapsed


def bench_codec(values: int = 20_000) -> dict[str, str]:
    """Per-value cost of sealing and opening the benchmark's payload, without a database."""
    import uuid

    from ratchet_api.model import EncryptionSurface
    from ratchet_core.defaults.metrics import NoOpMetricsCollector
    from ratchet_core.payload.codec import PayloadCodec, create_payload_encryption
    from ratchet_core.payload.encryption import SettingsKeyProvider
    from ratchet_core.payload.forms import dumps_compact
    from ratchet_core.runtime.config import DefaultRatchetConfig

    text = dumps_compact({"v": 1, "module": "m", "qualname": "f", "args": [ARGUMENT]})
    rows: dict[str, str] = {}
    for algorithm in ("AES-256-GCM", "XCHACHA20-POLY1305"):
        settings = DefaultRatchetConfig.from_dict(
            {"encryption.keys": f"k1:{key()}", "encryption.algorithm": algorithm}
        )
        codec = PayloadCodec.from_settings(
            settings,
            create_payload_encryption(settings),
            SettingsKeyProvider(settings),
            NoOpMetricsCollector(),
        )
        job_id = uuid.uuid4()
        started = time.perf_counter()
        sealed = [codec.seal(text, job_id, EncryptionSurface.PAYLOAD) for _ in range(values)]
        seal_us = (time.perf_counter() - started) / values * 1e6
        started = time.perf_counter()
        for value in sealed:
            codec.open(value, job_id, EncryptionSurface.PAYLOAD)
        open_us = (time.perf_counter() - started) / values * 1e6
        rows[f"{algorithm} seal / open per value (us, {len(text)} bytes)"] = (
            f"{seal_us:.1f} / {open_us:.1f}"
        )
    return rows


def bench_backend(backend: str, jobs: int) -> dict[str, str]:
    rows: dict[str, str] = {}
    measured: dict[str, dict[str, float]] = {}
    for label, settings in (("off", {}), ("on", {"encryption.keys": f"k1:{key()}"})):
        print(f"[{backend}] encryption {label}: enqueue ...", flush=True)
        with engine.scratch(backend) as url:
            single, bulk = bench_enqueue(url, jobs, settings)
        print(f"[{backend}] encryption {label}: processing ...", flush=True)
        with engine.scratch(backend) as url:
            processing = bench_processing(url, jobs, settings)
        measured[label] = {
            "enqueue single": single,
            "enqueue bulk": bulk,
            "processing c=16": processing,
        }
    for name in measured["off"]:
        off, on = measured["off"][name], measured["on"][name]
        rows[f"{name} (jobs/s) off / on / on:off"] = f"{off:,.0f} / {on:,.0f} / {on / off:.2f}"
    print(f"[{backend}] rotate ...", flush=True)
    with engine.scratch(backend) as url:
        seconds = bench_rotate(url, jobs)
    rows[f"rotate {jobs} pending jobs (payloads), s"] = f"{seconds:.1f} ({jobs / seconds:,.0f}/s)"
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "all"], default="all")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--codec-only", action="store_true", help="Only the per-value costs.")
    args = parser.parse_args(argv)
    if args.codec_only:
        for name, value in bench_codec().items():
            print(f"{name}: {value}")
        return 0
    backends = ["sqlite", "postgresql"] if args.backend == "all" else [args.backend]
    results: dict[str, dict[str, str]] = {b: bench_backend(b, args.jobs) for b in backends}
    codec_rows = bench_codec()
    for rows in results.values():
        rows.update(codec_rows)
    keys = list(dict.fromkeys(k for rows in results.values() for k in rows))
    width = max(len(k) for k in keys)
    print()
    print(f"jobs={args.jobs}, AES-256-GCM, argument and result ~200 bytes of JSON")
    header = f"{'metric':<{width}}  " + "  ".join(f"{b:>28}" for b in backends)
    print(header)
    print("-" * len(header))
    for k in keys:
        print(f"{k:<{width}}  " + "  ".join(f"{results[b].get(k, '-'):>28}" for b in backends))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
