"""The ``JobScheduler`` default (:class:`SchedulerService`, :mod:`ratchet_core.enqueue.scheduler`).

Every SPI default is importable as ``ratchet_core.defaults.<area>.<Name>`` (the table is in
``docs/overriding-an-spi.md``); this module names those whose code lives with the subsystem
that uses it."""

from __future__ import annotations

from ratchet_core.enqueue.scheduler import SchedulerService

__all__ = ["SchedulerService"]
