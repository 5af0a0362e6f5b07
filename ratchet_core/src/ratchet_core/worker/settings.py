"""Configuration keys of the worker and their resolved, typed snapshot."""

from __future__ import annotations

from datetime import timedelta

import attrs

from ratchet_api.model import PollingConfig
from ratchet_api.spi.runtime import RatchetConfig, RatchetConfigKey
from ratchet_core.defaults.execution import WORKER_CONCURRENCY
from ratchet_core.runtime.config import (
    parse_bool,
    parse_duration,
    parse_float,
    parse_int,
    parse_str_list,
    register_key,
)


def _parse_prefetch(raw: str) -> int | None:
    text = raw.strip().lower()
    if text in {"", "auto"}:
        return None
    return parse_int(minimum=0)(text)


WORKER_PREFETCH = register_key(
    RatchetConfigKey(
        "worker.prefetch",
        _parse_prefetch,
        None,
        "Claimed jobs that may wait for a free slot on top of the running ones (auto: equal to "
        "worker.concurrency). Higher values claim bigger batches (throughput); 0 claims only "
        "what can start at once (fairness between nodes with long jobs).",
    )
)
WORKER_CLAIM_BATCH_SIZE = register_key(
    RatchetConfigKey(
        "worker.claim_batch_size",
        parse_int(1, 10_000),
        100,
        "Largest number of jobs claimed by one claim statement.",
    )
)
WORKER_POLL_INTERVAL = register_key(
    RatchetConfigKey(
        "worker.poll_interval",
        parse_duration,
        timedelta(milliseconds=50),
        "Shortest delay between polls (used while polls find work and after a wake-up).",
    )
)
WORKER_POLL_MAX_INTERVAL = register_key(
    RatchetConfigKey(
        "worker.poll_max_interval",
        parse_duration,
        timedelta(seconds=1),
        "Longest delay between polls of an idle worker (the delay doubles after each empty poll "
        "up to this value; wake-ups cut it short).",
    )
)
WORKER_POLL_BACKOFF = register_key(
    RatchetConfigKey(
        "worker.poll_backoff_factor",
        parse_float(1.0, 100.0),
        2.0,
        "Growth factor of the delay after each empty poll.",
    )
)
WORKER_HEARTBEAT_INTERVAL = register_key(
    RatchetConfigKey(
        "worker.heartbeat_interval",
        parse_duration,
        timedelta(seconds=5),
        "How often the node heartbeats and refreshes the heartbeat of its running jobs.",
    )
)
WORKER_NODE_TIMEOUT = register_key(
    RatchetConfigKey(
        "worker.node_timeout",
        parse_duration,
        timedelta(seconds=30),
        "A node (or a running job) without a heartbeat for this long is dead: its jobs go back "
        "to pending (the attempt counted). Keep it several heartbeat intervals long.",
    )
)
WORKER_RECOVERY_INTERVAL = register_key(
    RatchetConfigKey(
        "worker.recovery_interval",
        parse_duration,
        timedelta(seconds=10),
        "How often a node looks for dead nodes and stale running jobs (under a store lease, so "
        "one node at a time does it).",
    )
)
WORKER_SHUTDOWN_TIMEOUT = register_key(
    RatchetConfigKey(
        "worker.shutdown_timeout",
        parse_duration,
        timedelta(seconds=30),
        "On stop (SIGTERM/SIGINT) running jobs get this long to finish; claimed jobs that never "
        "started are released at once, jobs still running afterwards are put back to pending.",
    )
)
WORKER_FLUSH_INTERVAL = register_key(
    RatchetConfigKey(
        "worker.completion_flush_interval",
        parse_duration,
        timedelta(milliseconds=5),
        "Successful completions are written in batches at most this long after the job ended; "
        "noted started marks this long after the job started (none if it ended first).",
    )
)
WORKER_FLUSH_BATCH_SIZE = register_key(
    RatchetConfigKey(
        "worker.completion_batch_size",
        parse_int(1, 10_000),
        500,
        "Largest number of completions written by one batched write.",
    )
)
WORKER_EXECUTION_TARGETS: RatchetConfigKey[tuple[str, ...]] = register_key(
    RatchetConfigKey(
        "worker.execution_targets",
        parse_str_list,
        (),
        "Execution target labels this node serves (comma separated; empty: every label). Jobs "
        "without a label run on any node.",
    )
)
WORKER_AUDIT = register_key(
    RatchetConfigKey(
        "worker.audit",
        parse_bool,
        True,
        "Save an execution record per attempt where the store has the JobAuditStore capability.",
    )
)


@attrs.frozen(kw_only=True)
class WorkerSettings:
    """The worker's configuration, read once at construction."""

    concurrency: int = 4
    prefetch: int = 4
    claim_batch_size: int = 100
    polling: PollingConfig = attrs.field(factory=PollingConfig)
    heartbeat_interval: timedelta = timedelta(seconds=5)
    node_timeout: timedelta = timedelta(seconds=30)
    recovery_interval: timedelta = timedelta(seconds=10)
    shutdown_timeout: timedelta = timedelta(seconds=30)
    flush_interval: timedelta = timedelta(milliseconds=5)
    flush_batch_size: int = 500
    execution_targets: tuple[str, ...] = ()
    audit: bool = True

    @classmethod
    def from_config(cls, settings: RatchetConfig) -> WorkerSettings:
        concurrency = settings.get(WORKER_CONCURRENCY)
        prefetch = settings.get(WORKER_PREFETCH)
        return cls(
            concurrency=concurrency,
            prefetch=concurrency if prefetch is None else prefetch,
            claim_batch_size=settings.get(WORKER_CLAIM_BATCH_SIZE),
            polling=PollingConfig(
                min_interval=settings.get(WORKER_POLL_INTERVAL),
                max_interval=max(
                    settings.get(WORKER_POLL_MAX_INTERVAL), settings.get(WORKER_POLL_INTERVAL)
                ),
                backoff_factor=settings.get(WORKER_POLL_BACKOFF),
            ),
            heartbeat_interval=settings.get(WORKER_HEARTBEAT_INTERVAL),
            node_timeout=settings.get(WORKER_NODE_TIMEOUT),
            recovery_interval=settings.get(WORKER_RECOVERY_INTERVAL),
            shutdown_timeout=settings.get(WORKER_SHUTDOWN_TIMEOUT),
            flush_interval=settings.get(WORKER_FLUSH_INTERVAL),
            flush_batch_size=settings.get(WORKER_FLUSH_BATCH_SIZE),
            execution_targets=settings.get(WORKER_EXECUTION_TARGETS),
            audit=settings.get(WORKER_AUDIT),
        )


WORKER_MALLOC_ARENA_MAX = register_key(
    RatchetConfigKey(
        "worker.malloc_arena_max",
        parse_int(0, 64),
        2,
        "glibc malloc arenas of a `ratchet worker` process (set with mallopt at start, as "
        "MALLOC_ARENA_MAX would): each job thread otherwise gets its own arena, which keeps "
        "freed memory and raises resident memory by several MiB; 0 keeps glibc's default. "
        "Applied by the worker command only (not to an application embedding a worker), and "
        "only where glibc is the C library.",
    )
)


__all__ = [
    "WORKER_AUDIT",
    "WORKER_CLAIM_BATCH_SIZE",
    "WORKER_EXECUTION_TARGETS",
    "WORKER_FLUSH_BATCH_SIZE",
    "WORKER_FLUSH_INTERVAL",
    "WORKER_HEARTBEAT_INTERVAL",
    "WORKER_NODE_TIMEOUT",
    "WORKER_POLL_BACKOFF",
    "WORKER_POLL_INTERVAL",
    "WORKER_POLL_MAX_INTERVAL",
    "WORKER_MALLOC_ARENA_MAX",
    "WORKER_PREFETCH",
    "WORKER_RECOVERY_INTERVAL",
    "WORKER_SHUTDOWN_TIMEOUT",
    "WorkerSettings",
]
