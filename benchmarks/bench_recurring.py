"""Recurring jobs at scale: N definitions due in the same minute, fired by K sweepers.

    .venv/bin/python benchmarks/bench_recurring.py --backend postgresql --definitions 10000 --sweepers 3

A scratch database is created (see ``bench_store.py``) and migrated; ``--definitions`` interval
definitions are written with one common ``next_fire_at`` (``--lead`` seconds ahead); at that
instant ``--sweepers`` ``RecurringSweeper``s (each on its own store, as separate workers would
be) start sweeping in a loop, and the script reports how long it took until every slot's job
was written (the job count is polled every 50 ms). It also checks that every definition fired
exactly once. Not a test: nothing is asserted about the figure.
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from datetime import timedelta

from ratchet_api.store.entities import JobQuery, RecurringJobEntity
from ratchet_api.store.protocols import JobQueryStore, RecurringJobStore
from ratchet_core.features.recurring.schedule import interval_expression
from ratchet_core.features.recurring.settings import RecurringSettings
from ratchet_core.features.recurring.sweeper import RecurringSweeper
from ratchet_core.features.recurring.template import JobTemplate
from ratchet_store_sql import SqlJobStore, migrate

try:
    from bench_store import scratch_database
except ImportError:  # run as a module
    from benchmarks.bench_store import scratch_database

INVOCATION = '{"v":1,"module":"ratchet_core.demo_jobs","qualname":"charge_card","static":true,"signature":"","args":[],"kwargs":{}}'


def run(backend: str, definitions: int, sweepers: int, lead: float) -> None:
    with scratch_database(backend) as url:
        migrate(url)
        setup = SqlJobStore(url)
        rec = setup.capability(RecurringJobStore)
        queries = setup.capability(JobQueryStore)
        assert rec is not None and queries is not None
        tag = f"bench-{uuid.uuid4().hex[:6]}"
        template = JobTemplate(invocation=INVOCATION, tags=(tag,)).encode()
        due_at = setup.server_now() + timedelta(seconds=lead)
        started = time.perf_counter()

        def write(part: range) -> None:
            for n in part:
                rec.save_recurring(
                    RecurringJobEntity(
                        name=f"bench-{n:05d}",
                        cron=interval_expression(timedelta(hours=1)),
                        target="ratchet_core.demo_jobs:charge_card",
                        payload=template,
                        next_fire_at=due_at,
                    )
                )

        writers = [
            threading.Thread(target=write, args=(range(i, definitions, 4),)) for i in range(4)
        ]
        for t in writers:
            t.start()
        for t in writers:
            t.join()
        print(
            f"[{backend}] wrote {definitions} definitions in {time.perf_counter() - started:.1f}s"
        )
        wait = (due_at - setup.server_now()).total_seconds()
        if wait < 0:
            print(f"  (setup took longer than --lead: definitions were due {-wait:.1f}s early)")
        stores = [SqlJobStore(url) for _ in range(sweepers)]
        stop = threading.Event()

        def loop(store: SqlJobStore) -> None:
            sweeper = RecurringSweeper(store, RecurringSettings(batch_size=500))
            while not stop.is_set():
                if sweeper.sweep() == 0:
                    stop.wait(0.05)

        time.sleep(max(0.0, wait))
        sweep_start = time.perf_counter()
        late_at_start = max(0.0, -wait)
        threads = [threading.Thread(target=loop, args=(s,)) for s in stores]
        for t in threads:
            t.start()
        query = JobQuery(tag=tag, limit=1)
        while queries.count_jobs(query) < definitions:
            time.sleep(0.05)
        from_start = time.perf_counter() - sweep_start  # the job count is polled every 50 ms
        stop.set()
        for t in threads:
            t.join()
        jobs = queries.search_jobs(JobQuery(tag=tag, limit=10_000))
        per_definition = {j.recurring_name for j in jobs}
        print(
            f"[{backend}] {definitions} definitions due at one instant, {sweepers} sweeper(s): "
            f"every slot's job written {from_start:.2f}s after the sweepers started "
            f"({from_start + late_at_start:.2f}s after the slot) "
            f"({definitions / max(from_start, 1e-9):,.0f} slots/s); "
            f"{len(jobs)} jobs for {len(per_definition)} definitions (exactly once: "
            f"{len(jobs) == len(per_definition) == definitions})"
        )
        for s in [*stores, setup]:
            s.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backend", default="postgresql", choices=["sqlite", "postgresql", "mariadb"]
    )
    parser.add_argument("--definitions", type=int, default=10_000)
    parser.add_argument("--sweepers", type=int, default=3)
    parser.add_argument("--lead", type=float, default=60.0, help="seconds until the common slot")
    args = parser.parse_args()
    run(args.backend, args.definitions, args.sweepers, args.lead)


if __name__ == "__main__":
    main()
