"""``manage.py ratchet_worker`` as a process, the way Django's ``db_worker`` process tests run
theirs: started with ``python -m django``, stopped with signals. A task is RUNNING soon after
the start (polled in the store, no timing threshold: the start-up time is measured in
benchmarks/README.md); SIGINT/SIGTERM stop gracefully with exit code 0 (a running task
finishes first), a second SIGINT exits at once, also with 0, and no run ever ends with -15. A
failed task is logged once, through Django's logging. A real SQLite file is the Django
database and the store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest

from ratchet_api.model import JobStatus
from ratchet_core.runtime.stores import open_store

ROOT = Path(__file__).parents[2]
SETTINGS = "tests.integrations.django_project.worker_settings"
WAIT = 60.0
"""Seconds a state may take to appear on a loaded machine before the test fails."""

pytestmark = pytest.mark.slow


class Worker:
    """A ``manage.py ratchet_worker`` process whose output (stdout and stderr) is read on a
    thread, so that tests can wait for a line."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "django", "ratchet_worker", "--no-status", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()

    @property
    def output(self) -> str:
        with self._changed:
            return "".join(self.lines)

    def wait_for_line(self, text: str) -> None:
        with self._changed:
            found = self._changed.wait_for(
                lambda: any(text in line for line in self.lines), timeout=WAIT
            )
        assert found, f"no line with {text!r} within {WAIT}s:\n{self.output}"

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait(self) -> int:
        code = self.process.wait(timeout=WAIT)
        self._reader.join(timeout=WAIT)
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=WAIT)


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    project = Project(tmp_path)
    yield project
    project.close()


class Project:
    """The worker settings on a fresh SQLite file, with Ratchet's schema."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        database = tmp_path / "project.sqlite3"
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "DJANGO_SETTINGS_MODULE": SETTINGS,
            "RATCHET_TEST_DJANGO_DB": str(database),
        }
        self.env.pop("RATCHET_STORE_URL", None)
        self._run("-m", "django", "ratchet_migrate")
        self.store = open_store(f"sqlite:///{database}")
        self.workers: list[Worker] = []

    def _run(self, *argv: str) -> str:
        done = subprocess.run(
            [sys.executable, *argv],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
        return done.stdout

    def enqueue(self, task: str, *args: object) -> uuid.UUID:
        tool = "tests.integrations.django_project.worker_tool"
        out = self._run("-m", tool, task, json.dumps(list(args)))
        return uuid.UUID(out.strip().splitlines()[-1])

    def status(self, job_id: uuid.UUID) -> JobStatus:
        job = self.store.find_by_id(job_id)
        assert job is not None
        return job.status

    def wait_for(self, what: str, condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + WAIT
        while not condition():
            assert time.monotonic() < deadline, f"{what}: not within {WAIT}s"
            time.sleep(0.01)

    def worker(self, *args: str) -> Worker:
        worker = Worker(self.env, *args)
        self.workers.append(worker)
        return worker

    def close(self) -> None:
        for worker in self.workers:
            worker.kill()
        self.store.close()


def _blocking_task(project: Project) -> tuple[uuid.UUID, Path]:
    """A task that runs until the returned file exists."""
    release = project.tmp_path / "release"
    started = project.tmp_path / "started"
    job_id = project.enqueue("wait_for_file", str(started), str(release), WAIT * 4)
    return job_id, release


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_burst_worker_runs_a_task_at_once_and_a_signal_lets_it_finish(
    project: Project, signum: int
) -> None:
    job_id, release = _blocking_task(project)
    worker = project.worker("--burst")

    project.wait_for("the task RUNNING", lambda: project.status(job_id) is JobStatus.RUNNING)
    worker.signal(signum)
    worker.wait_for_line("stopping gracefully")
    assert worker.process.poll() is None, "the worker must wait for its running task"
    release.touch()

    assert worker.wait() == 0, worker.output
    assert project.status(job_id) is JobStatus.SUCCEEDED


def test_a_second_sigint_exits_at_once_with_code_0(project: Project) -> None:
    job_id, _ = _blocking_task(project)  # never released
    worker = project.worker("--burst")

    project.wait_for("the task RUNNING", lambda: project.status(job_id) is JobStatus.RUNNING)
    worker.signal(signal.SIGINT)
    worker.wait_for_line("stopping gracefully")
    assert worker.process.poll() is None
    worker.signal(signal.SIGINT)

    assert worker.wait() == 0, worker.output
    assert "exiting at once" in worker.output
    # Cut off like a crashed worker: its claim is recovered after worker.node_timeout.
    assert project.status(job_id) is JobStatus.RUNNING


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_idle_worker_exits_0_on_a_signal(project: Project, signum: int) -> None:
    worker = project.worker()
    worker.wait_for_line("started: concurrency")

    worker.signal(signum)

    assert worker.wait() == 0, worker.output


def test_a_signal_at_any_point_of_the_start_never_ends_the_worker_with_minus_15(
    project: Project,
) -> None:
    """SIGTERM sent while the worker is still starting (as soon as it has its handlers,
    while Django imports the apps) and once it runs ends it with 0, never -15."""
    codes: list[int] = []
    for line in ("", "started: concurrency"):
        worker = project.worker("--log-level", "DEBUG")
        if line:
            worker.wait_for_line(line)
        else:
            # as soon as the worker imported Ratchet: its handlers are there then
            project.wait_for("the worker process to import", partial(_imported, worker))
        worker.signal(signal.SIGTERM)
        codes.append(worker.wait())
    assert codes == [0, 0], [w.output for w in project.workers]


def _imported(worker: Worker) -> bool:
    """Whether ``worker`` has its signal handlers: SIGTERM's handler is not the default."""
    status = Path(f"/proc/{worker.process.pid}/status")
    try:
        fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
    except FileNotFoundError:
        return True  # exited already: wait() reports how
    caught = int(fields["SigCgt"].strip(), 16)
    return bool(caught & (1 << (signal.SIGTERM - 1)))


def test_a_failed_task_is_logged_once_through_django_logging(project: Project) -> None:
    job_id = project.enqueue("explode", "kaboom-7")
    worker = project.worker("--burst")

    assert worker.wait() == 0, worker.output
    output = worker.output
    assert project.status(job_id) is JobStatus.FAILED
    # Django's line (django_tasks, with the traceback), and no second or third report of the
    # same failure: not ratchet.worker's, not loguru's own format.
    assert output.count("ValueError: kaboom-7") == 1, output
    assert f"Task id={job_id}" in output and "state=FAILED" in output
    assert " | ERROR " not in output, output


def test_a_task_returning_what_json_cannot_hold_fails_naming_the_type(project: Project) -> None:
    set_id = project.enqueue("returns_a_set")
    nested_id = project.enqueue("returns_a_nested_object")
    worker = project.worker("--burst")

    assert worker.wait() == 0, worker.output
    assert project.status(set_id) is JobStatus.FAILED
    assert project.status(nested_id) is JobStatus.FAILED
    output = worker.output
    assert "TypeError: Object of type set is not JSON serializable" in output
    assert "TypeError: Object of type object is not JSON serializable" in output
