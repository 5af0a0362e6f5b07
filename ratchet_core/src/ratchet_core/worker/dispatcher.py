"""The dispatcher: takes each claimed job from the producer and starts it on the right thread.

It prepares the job (``JobExecutor.prepare``: decode, re-check; a refused job or a target
missing here ends at once, through ``JobRunner.finish`` like every outcome), takes a slot of
its gate (``ClaimedJobs.enter_gate``: the execution kind or the execution target label, each
with its own concurrency from the ``ExecutionTuningProvider``) and starts it: ``def`` targets on
the ``ExecutorProvider``'s threads (or on the poller thread in ``ThreadingMode.INLINE``),
``async def`` targets on one event loop thread. A job that finishes starts the next one waiting
for its gate.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor

from ratchet_api.errors import TargetNotImportableError
from ratchet_core.worker.execution import ClaimedJob
from ratchet_core.worker.executor import JobExecutor
from ratchet_core.worker.outcome import Raised, Refused, Shutdown
from ratchet_core.worker.runner import JobRunner
from ratchet_core.worker.table import ClaimedJobs

_log = logging.getLogger("ratchet.worker")


class Dispatcher:
    """Starts claimed jobs (see the module docstring). Thread safe."""

    def __init__(
        self,
        *,
        table: ClaimedJobs,
        executor: JobExecutor,
        runner: JobRunner,
        inline: bool,
        node_id: str,
    ) -> None:
        self._table = table
        self._executor = executor
        self._runner = runner
        self._inline = inline
        self._node_id = node_id
        self._pool: Executor | None = None
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None

    def open(self, pool: Executor | None) -> None:
        """Use ``pool`` for ``def`` jobs (None: run them on the calling thread)."""
        self._pool = pool

    # ------------------------------------------------------------ accepting

    def accept(self, job: ClaimedJob) -> None:
        """Start a job just claimed (already in the table), or end it if it cannot run. One
        job's failure here releases that job only (:meth:`abandon`)."""
        try:
            self._accept(job)
        except Exception:  # noqa: BLE001 - a pluggable part's bug
            _log.exception(
                "worker %s: accepting job %s failed; releasing its claim",
                self._node_id,
                job.entity.id,
            )
            self.abandon(job)

    def _accept(self, job: ClaimedJob) -> None:
        refusal = self._executor.prepare(job)
        if isinstance(refusal, TargetNotImportableError):
            # a failed attempt, retried with backoff (newer code may be deployed by then)
            self._runner.finish(job, self._runner.decide(job, Raised(refusal, called=False)))
            return
        if refusal is not None:
            self._runner.finish(job, self._runner.decide(job, Refused(refusal)))
            return
        if self._inline and not job.is_async:
            # through the same guard as the pool path: a raise once the job began is a failed
            # attempt (retried with backoff), never a give-back of a RUNNING job
            following = self._guarded(job, self._runner.run_sync)
            if following is not None:
                self.submit(following)
            return
        admitted = self._table.enter_gate(job)
        if admitted is None:  # claimed as the worker stops: it would never start
            self.abandon(job)
        elif admitted:
            try:
                self.submit(job)
            except BaseException:
                self._table.leave_gate(job)
                raise

    def abandon(self, job: ClaimedJob) -> None:
        """Give back the claim of a job that has not started (fenced ``release_claim``, the
        attempt not counted), so another poll runs it. A job that began meanwhile is left
        alone (``ClaimedJobs.hand_over`` gives back only a QUEUED job): its own outcome path
        accounts for it."""
        following = self._runner.finish(job, self._runner.decide(job, Shutdown(started=False)))
        if following is not None:
            self.submit(following)

    # ------------------------------------------------------------ starting

    def submit(self, job: ClaimedJob) -> None:
        """Start ``job`` (it holds its gate slot) on the thread its kind runs on."""
        if job.is_async:
            asyncio.run_coroutine_threadsafe(self._run_async(job), self._event_loop())
        elif self._pool is None:
            self._run_sync(job)
        else:
            try:
                self._pool.submit(self._run_sync, job)
            except RuntimeError:  # executor shut down: the job is released by stop()
                _log.debug("executor closed; job %s stays queued for release", job.entity.id)

    def _run_sync(self, job: ClaimedJob) -> None:
        current: ClaimedJob | None = job
        while current is not None:
            following = self._guarded(current, self._runner.run_sync)
            if following is not None and following.is_async:
                self.submit(following)
                return
            current = following  # the next def job of this gate runs on this thread

    async def _run_async(self, job: ClaimedJob) -> None:
        try:
            following = await self._runner.run_async(job)
        except Exception as exc:  # noqa: BLE001 - a bug must not strand the job RUNNING
            following = self._failed(job, exc)
        if following is not None:
            self.submit(following)

    def _guarded(
        self, job: ClaimedJob, run: Callable[[ClaimedJob], ClaimedJob | None]
    ) -> ClaimedJob | None:
        try:
            return run(job)
        except Exception as exc:  # noqa: BLE001 - a bug must not strand the job RUNNING
            return self._failed(job, exc)

    def _failed(self, job: ClaimedJob, exc: BaseException) -> ClaimedJob | None:
        _log.error("worker %s: running job %s failed", self._node_id, job.entity.id, exc_info=exc)
        try:
            return self._runner.finish(job, self._runner.decide(job, Raised(exc)))
        except Exception:  # noqa: BLE001 - the hand-over itself is broken: last resort
            _log.exception(
                "worker %s: handing over the failure of job %s failed too; it leaves this "
                "worker unwritten and runs again after recovery",
                self._node_id,
                job.entity.id,
            )
            return self._runner.drop(job)

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="ratchet-async-jobs", daemon=True
                )
                thread.start()
                self._loop, self._loop_thread = loop, thread
            return self._loop

    def close(self) -> None:
        """Stop the pool (queued work is dropped: stop() gives those jobs back) and the
        event loop."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        loop, thread = self._loop, self._loop_thread
        if loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=5)
        if not loop.is_running():
            loop.close()


__all__ = ["Dispatcher"]
