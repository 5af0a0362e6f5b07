"""Process entry points of the multi-process tests (importable under the spawn start method)."""

from __future__ import annotations

from typing import Any

from ratchet_api.store import Completion
from ratchet_store_sql import SqlJobStore


def claim_until_empty(url: str, node_id: str, batch: int, barrier: Any) -> list[str]:
    """Claim and complete batches until three empty claims in a row; return the claimed ids.
    ``barrier`` (a manager Barrier) starts every process at once."""
    store = SqlJobStore(url)
    store.server_now()  # connect before the start line
    barrier.wait(60)
    claimed: list[str] = []
    empty = 0
    try:
        while empty < 3:
            got = store.claim_next_batch(node_id, batch)
            if not got:
                empty += 1
                continue
            empty = 0
            claimed.extend(str(j.id) for j in got)
            applied = store.mark_succeeded_many(
                [Completion(job_id=j.id, claim_seq=j.claim_seq, result=None) for j in got]
            )
            assert applied == {j.id for j in got}
    finally:
        store.close()
    return claimed
