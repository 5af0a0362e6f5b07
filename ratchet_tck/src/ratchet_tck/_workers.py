"""Functions run in spawned processes by the multi-process contracts (module level: picklable)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ratchet_api.store.protocols import JobStore

StoreFactory = Callable[[], JobStore]


def claim_until_empty(
    factory: StoreFactory, node_id: str, barrier: Any, results: Any, batch: int = 5
) -> None:
    """Open a store, wait for every peer, claim until the queue stays empty, report the ids."""
    claimed: list[str] = []
    error = ""
    try:
        store = factory()
        try:
            barrier.wait(timeout=60)
            empty_rounds = 0
            while empty_rounds < 3:
                jobs = store.claim_next_batch(node_id, batch)
                if jobs:
                    empty_rounds = 0
                    claimed.extend(str(job.id) for job in jobs)
                else:
                    empty_rounds += 1
                    time.sleep(0.05)
        finally:
            store.close()
    except BaseException as exc:  # noqa: BLE001 - sent to the parent, which fails the test  # reported to the parent, which fails the test with it
        error = f"{type(exc).__name__}: {exc}"
    results.put((node_id, claimed, error))
