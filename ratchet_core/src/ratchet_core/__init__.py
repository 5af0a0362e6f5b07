"""Ratchet engine: the container with priority alternatives, the scheduler, the worker and the
default SPI implementations.

The names an application needs are importable from here::

    from ratchet_core import RatchetContainer, circuit_breaker

    container = RatchetContainer(overrides={"store.url": "sqlite:///app.db"})
    scheduler = container.scheduler()       # a SchedulerService (ratchet_api.JobScheduler)
    worker = container.worker()             # a Worker

* :class:`RatchetContainer` / :func:`create_container` build the container;
  :func:`find_ratchet_container` finds it nested in an application container; :func:`alternative`
  marks a class as an SPI alternative; :class:`SpiDescription` is one row of ``ratchet spi``.
* :class:`SchedulerService` enqueues and manages jobs, :class:`Worker` runs them
  (:class:`WorkerStats` counts what it did); :func:`circuit_breaker` guards a job target.
* :func:`open_store` opens a store from a URL without a container.

The framework integrations live in ``ratchet_core.contrib.flask``, ``.django`` and ``.fastapi``.
The scheduler, worker and store modules are imported on first use, so ``import ratchet_core``
stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# First: imports dependency-injector without the web frameworks it would pull in (see _lean).
from ratchet_core.runtime import _lean  # noqa: F401  # isort: skip
from ratchet_core import _moved  # isort: skip

from ratchet_core.enqueue.invocation import circuit_breaker
from ratchet_core.runtime.alternatives import SpiDescription, alternative
from ratchet_core.runtime.container import (
    RatchetContainer,
    RatchetDynamicContainer,
    create_container,
    find_ratchet_container,
)

# the module paths of before 0.3 resolve to their new folders (docs/code-map.md)
_moved.install()

if TYPE_CHECKING:
    from ratchet_api.scheduler import JobScheduler
    from ratchet_core.enqueue.scheduler import SchedulerService
    from ratchet_core.runtime.stores import open_store
    from ratchet_core.worker import Worker, WorkerStats

    def _scheduler_service_is_a_job_scheduler(service: SchedulerService) -> JobScheduler:
        return service  # mypy --strict proves SchedulerService conforms to the API protocol


_LAZY = {
    "SchedulerService": "ratchet_core.enqueue.scheduler",
    "Worker": "ratchet_core.worker",
    "WorkerStats": "ratchet_core.worker",
    "open_store": "ratchet_core.runtime.stores",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ratchet_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "RatchetContainer",
    "RatchetDynamicContainer",
    "SchedulerService",
    "SpiDescription",
    "Worker",
    "WorkerStats",
    "alternative",
    "circuit_breaker",
    "create_container",
    "find_ratchet_container",
    "open_store",
]
