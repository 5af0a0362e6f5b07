"""What running a store of an older store SPI version through the engine's adapter costs.

    .venv/bin/python benchmarks/bench_store_spi.py [--jobs 2000] [--batch 32] [--rounds 3]

Two sqlite3 stores that differ only by their SPI version: the frozen 1.0 store of
``tests/tck/v1_store`` run through ``ratchet_core.runtime.store_compat.adapt_store``, and the same store
moved to 1.1 by the diff of ``docs/stores/changelog.md`` (applied to a temporary copy, as
``tests/tck/test_v1_store.py`` does) run natively. Each round inserts ``--jobs`` jobs and then
drains them the way a worker's hot path does: ``claim_next_batch(batch)``, ``mark_dispatched``
of the batch, ``mark_succeeded_many`` of the batch. Prints jobs/s per store (median of the
rounds, and every round). The adapter's ``mark_dispatched`` reads each claim back with
``find_by_id`` (a 1.0 store keeps no started marks), which is the difference measured.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FROZEN = ROOT / "tests" / "tck" / "v1_store"


def _store_1_1(folder: Path) -> Any:
    """The 1.1 store class: the changelog's diff applied to a copy of the frozen store."""
    text = (ROOT / "docs" / "stores" / "changelog.md").read_text()
    found = re.search(r"```diff\n(.*?)```", text[text.index("<!-- sqlite-1.0-to-1.1") :], re.S)
    assert found is not None, "docs/stores/changelog.md has no sqlite diff"
    copy = folder / "v1_1"
    shutil.copytree(FROZEN, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "v1.1.diff").write_text(found.group(1))
    subprocess.run(["git", "apply", str(folder / "v1.1.diff")], cwd=copy, check=True)
    module_path = copy / "src" / "ratchet_v1_sqlite" / "store.py"
    spec = importlib.util.spec_from_file_location("ratchet_v1_1_sqlite_store", module_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.V1SqliteStore


def _drain(store: Any, jobs: int, batch: int) -> float:
    from ratchet_api.store.entities import Completion
    from ratchet_tck.fixture import BaseStoreFixture

    fixture = BaseStoreFixture()
    store.bulk_insert([fixture.new_pending_job() for _ in range(jobs)])
    started = time.perf_counter()
    done = 0
    while claimed := store.claim_next_batch("bench", batch):
        current = store.mark_dispatched({j.id: j.claim_seq for j in claimed})
        store.mark_succeeded_many(
            [Completion(job_id=j.id, claim_seq=j.claim_seq) for j in claimed if j.id in current]
        )
        done += len(claimed)
    assert done == jobs, f"drained {done} of {jobs}"
    return done / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the adapter's warning once per store opened

    sys.path.insert(0, str(FROZEN / "src"))
    from ratchet_v1_sqlite import V1SqliteStore

    from ratchet_core.runtime.store_compat import adapt_store

    with tempfile.TemporaryDirectory(prefix="bench-spi-") as tmp:
        store_1_1 = _store_1_1(Path(tmp))
        makers: dict[str, Callable[[str], Any]] = {
            "1.1 store, native": store_1_1,
            "1.0 store, adapted": lambda path: adapt_store(V1SqliteStore(path)),
        }
        for name, make in makers.items():
            rates = []
            for round_ in range(args.rounds):
                store = make(str(Path(tmp) / f"{name[:3]}-{round_}.db"))
                try:
                    rates.append(_drain(store, args.jobs, args.batch))
                finally:
                    store.close()
            print(
                f"{name}: {statistics.median(rates):,.0f} jobs/s "
                f"(rounds {', '.join(f'{r:,.0f}' for r in rates)})"
            )


if __name__ == "__main__":
    main()
