"""The worker: claims due jobs and runs them (see :mod:`ratchet_core.worker.core`)."""

from ratchet_core.worker.core import Worker
from ratchet_core.worker.settings import WorkerSettings
from ratchet_core.worker.stats import WorkerStats

__all__ = ["Worker", "WorkerSettings", "WorkerStats"]
