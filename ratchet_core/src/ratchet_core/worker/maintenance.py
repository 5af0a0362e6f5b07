"""Heartbeats and recovery of work lost by dead nodes.

Every ``worker.heartbeat_interval`` the node refreshes its own row (``upsert_heartbeat``) and the
``heartbeat_at`` of the jobs it owns (``touch_running_jobs``), on a thread that does nothing else
(its liveness must not wait on a sweep or on anything else). Every ``worker.recovery_interval``
one node at a time (store lease ``ratchet.startup.orphan-recovery`` through the
``StartupCoordinator``) runs :meth:`Maintenance.recover` on a second thread, which also refreshes
the offset to the store's clock:

1. nodes whose heartbeat is older than ``worker.node_timeout``: their RUNNING jobs go back to
   PENDING, the attempt counted only if the job had started (``reset_orphan_jobs``, which
   atomically spares a node that heartbeat again and any job claimed or touched since the
   cutoff), then the node rows still inactive are deleted;
2. RUNNING jobs whose own heartbeat is older than the timeout (their node still heartbeats, or
   has no row): a job that never started (no ``mark_dispatched``) is given back with
   ``release_claim(..., unless_dispatched=True)``, its attempt not counted; a started one is
   put back with a fenced ``schedule_retry`` (attempt counted), or sent to the dead letter with
   a fenced ``mark_failed_terminal`` when its attempts already exhaust ``max_retries``.

A job's attempt is therefore only charged for claims that started: a job never reaches the
dead letter without having run.

3. the extra sweeps the worker registers (``sweeps``): the workflow sweep settles the steps of
   finished parents whose settling was lost, and expires signals whose timeout passed.

Jobs reset in step 1 whose attempts are exhausted are dead-lettered by the worker that claims
them next, before they run (see ``Worker._prepare``).

Further periodic work (retention, :mod:`ratchet_core.features.retention`) plugs in as
:class:`MaintenanceTask` objects run on the recovery thread (never on the heartbeat thread).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Protocol
from uuid import UUID

from ratchet_api.model import NodeIdentity
from ratchet_api.spi.runtime import StartupCoordinator
from ratchet_api.store.entities import NodeEntity
from ratchet_api.store.protocols import JobStore
from ratchet_core.features.recurring.sweeper import RecurringSweeper
from ratchet_core.observability.logs import is_transient, one_line

_log = logging.getLogger("ratchet.worker")


class MaintenanceTask(Protocol):
    """Periodic work of the maintenance thread. ``run`` must be short (a time-boxed slice: the
    thread also heartbeats) and never raise; it returns True when work is left, and is then
    called again as soon as the heartbeat allows instead of after ``interval`` seconds."""

    interval: float

    def run(self) -> bool: ...


RECOVERY_ACTION = "orphan-recovery"
STALE_BATCH = 500


class Maintenance:
    """The heartbeat/recovery thread of one worker."""

    def __init__(
        self,
        store: JobStore,
        identity: NodeIdentity,
        startup: StartupCoordinator,
        *,
        heartbeat_interval: timedelta,
        node_timeout: timedelta,
        recovery_interval: timedelta,
        owned_ids: Callable[[], list[UUID]],
        on_recovered: Callable[[int], None],
        on_clock: Callable[[timedelta], None],
        recurring: RecurringSweeper | None = None,
        sweeps: Sequence[Callable[[], int]] = (),
        tasks: Sequence[MaintenanceTask] = (),
    ) -> None:
        self._store = store
        self._identity = identity
        self._startup = startup
        self._heartbeat_interval = heartbeat_interval.total_seconds()
        self._node_timeout = node_timeout
        self._recovery_interval = recovery_interval.total_seconds()
        self._owned_ids = owned_ids
        self._on_recovered = on_recovered
        self._on_clock = on_clock
        self._sweeps = tuple(sweeps)
        self._tasks = list(tasks)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._started_at = datetime.now(UTC)
        self._recurring = recurring  # fires recurring jobs on a thread of its own

    def start(self) -> None:
        self.heartbeat()
        self._threads = [
            threading.Thread(target=self._liveness, name="ratchet-heartbeat", daemon=True),
            threading.Thread(target=self._recovery, name="ratchet-recovery", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        if self._recurring is not None:
            self._recurring.start()

    def stop(self) -> None:
        self._stop.set()
        if self._recurring is not None:
            self._recurring.stop()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=10)

    def deregister(self) -> None:
        """Delete this node's row after a clean stop (heartbeats stopped), so that the next
        recovery sweep does not report a dead node. Never raises (logged)."""
        try:
            self._store.delete_nodes_by_ids([self._identity.node_id])
        except Exception as exc:  # noqa: BLE001 - the row then expires through recovery
            _log.warning(
                "removing the row of node %s failed (%s); it expires through recovery",
                self._identity.node_id,
                one_line(exc),
            )

    def _liveness(self) -> None:
        # Nothing but heartbeats on this thread: a slow recovery sweep, a clock read or a log
        # handler must never make the node look dead to its peers.
        while not self._stop.wait(self._heartbeat_interval):
            self.heartbeat()

    def _recovery(self) -> None:
        # Recover once at start (jobs of nodes that died while no node was running), then
        # periodically; the periodic tasks (retention) at their own rhythm in between. Never
        # on the heartbeat thread: a slow sweep must not make this node look dead.
        now = time.monotonic()
        next_recovery = now
        next_task = [now + task.interval for task in self._tasks]
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_recovery:
                self.recover()
                self._refresh_clock()
                next_recovery = time.monotonic() + self._recovery_interval
            for index, task in enumerate(self._tasks):
                if not self._stop.is_set() and time.monotonic() >= next_task[index]:
                    more = task.run()
                    next_task[index] = time.monotonic() + (0.0 if more else task.interval)
            wake = min(next_recovery, *next_task)
            if self._stop.wait(max(0.0, wake - time.monotonic())):
                return

    def heartbeat(self) -> None:
        """Refresh this node and its running jobs; never raises (logged)."""
        owned = self._owned_ids()
        try:
            self._store.upsert_heartbeat(
                NodeEntity(
                    node_id=self._identity.node_id,
                    host=self._identity.host,
                    pid=self._identity.pid,
                    started_at=self._started_at,
                    running_jobs=len(owned),
                    tags=tuple(sorted(self._identity.tags)),
                )
            )
            if owned:
                self._store.touch_running_jobs(self._identity.node_id, owned)
        except Exception as exc:  # noqa: BLE001 - a missed heartbeat is retried next interval
            if is_transient(exc):
                _log.warning(
                    "heartbeat of node %s failed: %s", self._identity.node_id, one_line(exc)
                )
            else:
                _log.warning("heartbeat of node %s failed", self._identity.node_id, exc_info=True)

    def _refresh_clock(self) -> None:
        try:
            self._on_clock(self._store.server_now() - datetime.now(UTC))
        except Exception as exc:  # noqa: BLE001 - the previous offset stays in use
            _log.debug("reading the store clock failed: %s", one_line(exc))

    def recover(self) -> int:
        """One recovery sweep under the startup lease; returns the number of jobs recovered
        (put back or dead-lettered). Never raises (logged)."""
        try:
            if not self._startup.try_acquire(RECOVERY_ACTION, self._node_timeout):
                return 0
        except Exception:  # noqa: BLE001 - try again next interval
            _log.warning("recovery lease could not be taken", exc_info=True)
            return 0
        try:
            count = self._recover_dead_nodes() + self._recover_stale_jobs()
            for sweep in self._sweeps:  # workflow settling, signal timeouts
                try:
                    sweep()
                except Exception:  # noqa: BLE001 - one sweep must not stop the others
                    _log.warning("maintenance sweep %r failed", sweep, exc_info=True)
        except Exception:  # noqa: BLE001 - try again next interval
            _log.warning("recovery sweep failed", exc_info=True)
            return 0
        finally:
            try:
                self._startup.release(RECOVERY_ACTION)
            except Exception:  # noqa: BLE001 - the lease expires on its own
                _log.debug("releasing the recovery lease failed", exc_info=True)
        if count:
            self._on_recovered(count)
        return count

    def _recover_dead_nodes(self) -> int:
        # The cutoff is taken before the nodes are read: the store resets only jobs of nodes
        # (and jobs) still without a heartbeat since it, so a node that heartbeats or claims
        # again between the two calls keeps its fresh work.
        cutoff = self._store.server_now() - self._node_timeout
        dead = [
            n.node_id
            for n in self._store.find_inactive_nodes(self._node_timeout)
            if n.node_id != self._identity.node_id
        ]
        if not dead:
            return 0
        reset = self._store.reset_orphan_jobs(dead, cutoff)
        # only rows still inactive: a node that heartbeat again keeps its row
        self._store.delete_inactive_nodes(self._node_timeout)
        _log.warning(
            "nodes %s stopped heartbeating: %d of their running jobs were put back to pending",
            ", ".join(dead),
            reset,
        )
        return reset

    def _recover_stale_jobs(self) -> int:
        cutoff = self._store.server_now() - self._node_timeout
        mine = set(self._owned_ids())
        count = 0
        for job in self._store.find_stale_running_jobs(cutoff, STALE_BATCH):
            if job.owner == self._identity.node_id and job.id in mine:
                continue  # ours and alive: the next heartbeat refreshes it
            reason = (
                f"node {job.owner or '?'} stopped heartbeating job {job.id} "
                f"(no heartbeat for {self._node_timeout.total_seconds():g}s)"
            )
            if job.dispatched_at is None:
                # claimed, never started: given back without charging the attempt (refused if
                # it started meanwhile; the next sweep then sees it started)
                applied = self._store.release_claim(job.id, job.claim_seq, unless_dispatched=True)
            elif job.attempt > job.max_retries:
                applied = self._store.mark_failed_terminal(
                    job.id,
                    job.claim_seq,
                    f"WorkerLost: {reason}; attempt {job.attempt} exhausted max_retries "
                    f"{job.max_retries}",
                )
            else:
                applied = self._store.schedule_retry(
                    job.id, job.claim_seq, self._store.server_now(), f"WorkerLost: {reason}"
                )
            if applied:
                count += 1
                _log.warning("recovered stale job %s: %s", job.id, reason)
        return count


__all__ = ["RECOVERY_ACTION", "Maintenance", "MaintenanceTask"]
