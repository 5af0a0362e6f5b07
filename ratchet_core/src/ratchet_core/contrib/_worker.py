"""Shared by the framework worker commands (``flask ratchet worker``, ``manage.py
ratchet_worker``): start a worker on a migrated store and run it, in the foreground."""

from __future__ import annotations

from collections.abc import Callable

from ratchet_core.container import RatchetDynamicContainer
from ratchet_core.stores import require_schema
from ratchet_core.worker import Worker


def start_worker(container: RatchetDynamicContainer, *, upgrade_command: str) -> Worker:
    """The container's worker, after checking that its store's schema exists and is current
    (``StoreError`` naming ``upgrade_command`` otherwise). Raises ``RatchetError``s."""
    require_schema(container.job_store(), upgrade_command=upgrade_command)
    worker: Worker = container.worker()
    return worker


def run_worker(worker: Worker, *, burst: bool, timeout: float, echo: Callable[[str], None]) -> bool:
    """Run ``worker`` until SIGTERM/SIGINT, or with ``burst`` until no due job is left (at most
    ``timeout`` seconds). Reports through ``echo``; False when ``burst`` gave up with work
    left."""
    if burst:
        stats = worker.run_until_idle(timeout)
        echo(
            f"claimed={stats.claimed} succeeded={stats.succeeded} failed={stats.failed} "
            f"retried={stats.retried}"
        )
        return stats.idle
    echo("Ratchet worker started; Ctrl-C stops it")
    stats = worker.run_forever()
    echo(f"stopped: succeeded={stats.succeeded} failed={stats.failed}")
    return True


__all__ = ["run_worker", "start_worker"]
