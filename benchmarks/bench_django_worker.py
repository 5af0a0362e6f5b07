"""Start-up of ``manage.py ratchet_worker`` (issue 28): how soon a new worker process takes a
task, and how soon it has its signal handlers.

For each run: a fresh SQLite project (``tests/integrations/django_project/worker_settings``),
one task enqueued through Django's Tasks API, then ``python -m django ratchet_worker --burst``
started while this process polls the store (every 2 ms) until the task is RUNNING. Reported:

* ``handlers``: process start -> SIGTERM no longer has its default action (``/proc/PID/status``
  ``SigCgt``); a SIGTERM before this ends the process with -15;
* ``first claim``: process start -> the task RUNNING in the store;
* baselines: ``python -c pass`` and ``django.setup()`` with the same settings.

Run: ``.venv/bin/python benchmarks/bench_django_worker.py [--runs 7] [--settings MODULE]``.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ratchet_api.model import JobStatus  # noqa: E402
from ratchet_core.runtime.stores import open_store  # noqa: E402


def _env(settings: str, database: Path) -> dict[str, str]:
    env = {
        **os.environ,
        # a PYTHONPATH given to the benchmark comes after the checkout (another tree's
        # sources, to measure an older version against the same project)
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "DJANGO_SETTINGS_MODULE": settings,
        "RATCHET_TEST_DJANGO_DB": str(database),
        "RATCHET_STORE_URL": f"sqlite:///{database}",
    }
    return env


def _handlers_installed(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    caught = next(line for line in text.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split(":")[1], 16) & (1 << (signal.SIGTERM - 1)))


def one_run(settings: str) -> tuple[float, float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        database = Path(tmp) / "bench.sqlite3"
        env = _env(settings, database)
        subprocess.run(
            [sys.executable, "-m", "django", "ratchet_migrate"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
        )
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.integrations.django_project.worker_tool",
                "nap",
                "[30]",
            ],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        job_id = uuid.UUID(out.strip().splitlines()[-1])
        store = open_store(f"sqlite:///{database}")
        try:
            started = time.perf_counter()
            worker = subprocess.Popen(
                [sys.executable, "-m", "django", "ratchet_worker", "--burst", "--no-status"],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            handlers = None
            while True:
                now = time.perf_counter() - started
                if handlers is None and _handlers_installed(worker.pid):
                    handlers = now
                job = store.find_by_id(job_id)
                if job is not None and job.status is JobStatus.RUNNING:
                    claimed = now
                    break
                if now > 120:
                    raise RuntimeError("the task was not RUNNING within 120 s")
                time.sleep(0.002)
            worker.send_signal(signal.SIGINT)
            worker.send_signal(signal.SIGINT)
            code = worker.wait(60)
        finally:
            store.close()
    return handlers if handlers is not None else claimed, claimed, code


def _timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--settings", default="tests.integrations.django_project.worker_settings")
    options = parser.parse_args()

    handlers: list[float] = []
    claims: list[float] = []
    codes: list[int] = []
    for _ in range(options.runs):
        h, c, code = one_run(options.settings)
        handlers.append(h)
        claims.append(c)
        codes.append(code)
    with tempfile.TemporaryDirectory() as tmp:
        env = _env(options.settings, Path(tmp) / "x.sqlite3")
        bare = min(_timed([sys.executable, "-c", "pass"], env) for _ in range(3))
        setup = min(
            _timed([sys.executable, "-c", "import django; django.setup()"], env) for _ in range(3)
        )

    def row(name: str, values: list[float]) -> str:
        return (
            f"| {name} | {min(values) * 1000:.0f} | {statistics.median(values) * 1000:.0f} "
            f"| {max(values) * 1000:.0f} |"
        )

    print(f"settings {options.settings}, {options.runs} runs, load {os.getloadavg()[0]:.2f}")
    print("| from process start to | min ms | median ms | max ms |")
    print("| --- | ---: | ---: | ---: |")
    print(row("signal handlers installed", handlers))
    print(row("first task RUNNING (first claim)", claims))
    print(f"| baseline: `python -c pass` | {bare * 1000:.0f} | | |")
    print(f"| baseline: `django.setup()` | {setup * 1000:.0f} | | |")
    print(f"exit codes after SIGINT, SIGINT: {sorted(set(codes))}")


if __name__ == "__main__":
    main()
