"""A thread pool whose threads never keep the process alive.

``concurrent.futures.ThreadPoolExecutor`` joins its threads when the interpreter exits, so a job
stuck in an endless loop kept a stopped worker process alive forever (issue 17). The worker's
job threads are therefore daemon threads that nothing joins at exit: after
``worker.shutdown_timeout`` a job still running is abandoned (put back to pending by the worker)
and the process can exit while its thread is still inside the job.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, ParamSpec, TypeVar

_P = ParamSpec("_P")
_T = TypeVar("_T")

_Work = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonThreadPool(Executor):
    """An ``Executor`` with at most ``max_workers`` daemon threads, started on demand.

    ``shutdown(wait=True)`` waits for the threads that are idle or finish their current work;
    nothing waits for them at interpreter exit. Thread safe.
    """

    def __init__(self, max_workers: int, thread_name_prefix: str = "ratchet-job") -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self._max_workers = max_workers
        self._prefix = thread_name_prefix
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for work
        self._queued = 0  # work not yet taken by a thread
        self._shutdown = False

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        future: Future[_T] = Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new work after shutdown")
            self._work.put((future, fn, args, kwargs))
            self._queued += 1
            if self._queued > self._idle and len(self._threads) < self._max_workers:
                thread = threading.Thread(
                    target=self._run,
                    name=f"{self._prefix}_{len(self._threads)}",
                    daemon=True,
                )
                self._threads.append(thread)
                thread.start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            threads = list(self._threads)
        if cancel_futures:
            while True:
                try:
                    item = self._work.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    with self._lock:
                        self._queued -= 1
                    item[0].cancel()
        for _ in threads:
            self._work.put(None)
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()

    def _run(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            item = self._work.get()
            with self._lock:
                self._idle -= 1
                if item is not None:
                    self._queued -= 1
            if item is None:
                return
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # noqa: BLE001 - handed to the future
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del item, future, fn, args, kwargs


__all__ = ["DaemonThreadPool"]
