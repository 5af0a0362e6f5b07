"""Chaos (issue 17, "What must be shown"): real ``ratchet worker`` processes on SQLite,
PostgreSQL and MariaDB, with SIGKILLs, a node SIGSTOPped past its node timeout, and every
database connection killed once (server backends only), in bounded time.

Every job appends to an execution log outside Ratchet's tables (``targets.record``: a start
line, then an end or failure line, with the process id). At the end:

* 0 lost, 0 stuck: every job is SUCCEEDED or FAILED (dead letter), none PENDING or RUNNING;
* every job ran; a SUCCEEDED job has a finished execution;
* every duplicate execution is attributable: an execution that never finished belongs to a
  SIGKILLed process, and a job that succeeded more than once did so because all but one of
  those successes ran on a SIGKILLed process (its completion write died with it), on the
  stopped process while it was being declared dead (its late completion was refused), or
  before every database connection was killed (its completion or its node's heartbeats were
  cut off, so the claim was recovered), or on a live node that another node declared dead (its
  heartbeats came later than ``worker.node_timeout`` on a loaded machine; the declaration is
  read from the workers' logs and must follow the execution's start);
* no job is dead-lettered without a failed execution (a planned failure, or an execution
  lost with its worker: SIGKILLed, even after the job's code ended, since its batched
  completion write died with it; or stopped, declared dead and its late result refused).

* audit records agree with the kept outcome: a SUCCEEDED job has at most one execution record
  SUCCEEDED and not superseded (none when its completion died with a SIGKILLed worker before
  being written), a dead-lettered job none; every other SUCCEEDED record of a job is marked
  superseded (its claim was replaced while it ran).
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from ratchet_api.model import JobStatus
from tests import servers
from tests.crash import targets
from tests.crash.harness import (
    Execution,
    by_job,
    executions,
    kill,
    start_worker,
    stop_outside_a_write,
    wait_for,
)
from tests.engine.conftest import build_container, migrate

pytestmark = pytest.mark.slow

JOBS = 240
JOB_MS = 400


@dataclass
class Cluster:
    url: str
    cwd: Path
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    killed: set[int] = field(default_factory=set)
    stopped: dict[int, float] = field(default_factory=dict)  # pid -> time it was resumed
    connections_killed_at: float | None = None

    def start(self, name: str) -> subprocess.Popen[bytes]:
        node = f"{name}-{uuid.uuid4().hex[:6]}"
        process = start_worker(self.url, node, self.cwd, 3)
        self.workers[node] = process
        return process

    def sigkill(self, process: subprocess.Popen[bytes]) -> None:
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        self.killed.add(process.pid)

    def pause(self, process: subprocess.Popen[bytes], seconds: float) -> None:
        if self.url.startswith("sqlite"):
            # stopped inside a write it would hold the file's only write lock and stall every
            # node (the servers' locks go with the connections the test kills right after)
            stop_outside_a_write(process, self.url)
        else:
            process.send_signal(signal.SIGSTOP)
        time.sleep(seconds)
        self.stopped[process.pid] = time.time()
        process.send_signal(signal.SIGCONT)

    def declared_dead(self) -> dict[int, float]:
        """pid -> when another node's recovery, having reset its claims, logged it dead (a live
        node too, whose heartbeats came late on a loaded machine: at-least-once allows the
        rerun). Read from the workers' logs (``<cwd>/<node>.out``)."""
        line = re.compile(  # the node sweep, or the stale-job sweep for one job of a node
            r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) WARNING "
            r".*?(?:nodes (.+?) stopped heartbeating:|recovered stale job \S+: node (\S+) stopped)"
        )
        pids = {node: process.pid for node, process in self.workers.items()}
        dead: dict[int, float] = {}
        for out in self.cwd.glob("*.out"):
            for text in out.read_text(errors="replace").splitlines():
                found = line.match(text)
                if found is None:
                    continue
                at = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                for node in (found.group(2) or found.group(3)).split(", "):
                    if node in pids:
                        dead[pids[node]] = min(at, dead.get(pids[node], at))
        return dead

    def close(self) -> None:
        for process in self.workers.values():
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
            kill(process)


def explain(
    number: int, runs: list[Execution], cluster: Cluster, dead: dict[int, float]
) -> list[str]:
    """What is wrong with the executions of job ``number`` (nothing: an empty list)."""
    problems = []
    for run in runs:
        if run.outcome is None and run.pid not in cluster.killed:
            problems.append(f"an execution by live process {run.pid} never finished")
    successes = [r for r in runs if r.outcome == "E"]
    # a success whose completion could not count: its process was SIGKILLed (before its
    # completion write reached the store), or stopped and declared dead meanwhile, or it ran
    # when every database connection was killed (its completion or its node's heartbeats were
    # cut: the claim was recovered and the job ran again, as at-least-once delivery allows)
    cut = cluster.connections_killed_at
    lost = [
        r
        for r in successes
        if r.pid in cluster.killed
        or (r.pid in cluster.stopped and r.started < cluster.stopped[r.pid])
        or (cut is not None and r.started < cut)
        or (r.pid in dead and r.started < dead[r.pid])
    ]
    if len(successes) > 1 + len(lost):
        problems.append(
            f"{len(successes)} successful executions, only {len(lost)} by a killed or "
            "stopped worker, cut off by the connection kill or by a node declared dead"
        )
    return problems


def test_chaos_loses_nothing_and_every_duplicate_is_explained(
    sql_store_url: str, tmp_path: Path
) -> None:
    container = build_container(sql_store_url)
    store = container.job_store()
    migrate(store)
    scheduler = container.scheduler()
    log = tmp_path / "executions.log"
    ids: dict[Any, int] = {}
    for n in range(JOBS):
        # every 8th job fails its first execution; every 5th has no retry at all
        job = scheduler.job(targets.record).args(str(log), n, JOB_MS, n % 8 == 0)
        ids[job.max_retries(0 if n % 5 == 0 else 3).enqueue()] = n
    cluster = Cluster(sql_store_url, tmp_path)
    a, b, c = cluster.start("a"), cluster.start("b"), cluster.start("c")
    server = not sql_store_url.startswith("sqlite")
    try:
        wait_for(lambda: len(executions(log)) >= 15, 60, "the workers to start running jobs")
        cluster.sigkill(a)
        cluster.start("a2")
        time.sleep(1.0)
        cluster.pause(b, 3.5)  # past worker.node_timeout (2 s): the others recover its jobs
        if server:
            assert servers.kill_database_connections(sql_store_url) >= 1
            cluster.connections_killed_at = time.time()
        time.sleep(1.0)
        cluster.sigkill(c)
        cluster.start("c2")

        def settled() -> bool:
            return all(
                store.find_by_id(i).status in (JobStatus.SUCCEEDED, JobStatus.FAILED) for i in ids
            )

        wait_for(settled, 100, "every job to succeed or be dead-lettered")
        for process in cluster.workers.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in cluster.workers.values():
            process.wait(30)

        jobs = {i: store.find_by_id(i) for i in ids}
        runs = by_job(executions(log))
        assert set(runs) == set(ids.values()), "a job never ran"
        stuck = [
            j.id for j in jobs.values() if j.status not in (JobStatus.SUCCEEDED, JobStatus.FAILED)
        ]
        assert not stuck
        dead = cluster.declared_dead()  # read the workers' logs once
        problems = {
            ids[i]: found for i in ids if (found := explain(ids[i], runs[ids[i]], cluster, dead))
        }
        assert not problems, problems
        for job_id, job in jobs.items():
            job_runs = runs[ids[job_id]]
            if job.status is JobStatus.SUCCEEDED:
                assert any(r.outcome == "E" for r in job_runs), f"job {ids[job_id]} never finished"
            else:
                # failed: a planned failure, or an execution lost with its worker: killed (even
                # one that ended: its completion write, batched, may have died with the process;
                # the attempt it used is charged, so a job without retries left then goes to
                # the dead letter as WorkerLost), or stopped and declared dead (its late result
                # is refused)
                failed = [
                    r
                    for r in job_runs
                    if r.outcome in ("F", None)
                    or r.pid in cluster.killed
                    or (r.pid in cluster.stopped and r.started < cluster.stopped[r.pid])
                    or (r.pid in dead and r.started < dead[r.pid])
                ]
                assert failed, (
                    f"job {ids[job_id]} dead-lettered without a failed execution: "
                    f"{job.last_error!r} attempt={job.attempt} runs={job_runs} "
                    f"stopped={cluster.stopped} killed={cluster.killed}"
                )
            kept = [
                r
                for r in store.find_executions_by_job_id(job_id)
                if r.status is JobStatus.SUCCEEDED and not r.superseded
            ]
            limit = 1 if job.status is JobStatus.SUCCEEDED else 0
            assert len(kept) <= limit, f"job {ids[job_id]}: {len(kept)} SUCCEEDED audit records"
        total = sum(len(r) for r in runs.values())
        duplicates = {n: len(r) for n, r in runs.items() if len(r) > 1}
        lost_with_kill = sum(1 for r in runs.values() for x in r if x.outcome is None)
        dead = sum(1 for j in jobs.values() if j.status is JobStatus.FAILED)
        print(
            f"\n[{sql_store_url.split(':', 1)[0]}] {JOBS} jobs, {total} executions, "
            f"{len(duplicates)} jobs ran more than once, {lost_with_kill} executions lost "
            f"with a SIGKILLed worker, {dead} dead-lettered"
        )
    finally:
        cluster.close()
        store.close()
