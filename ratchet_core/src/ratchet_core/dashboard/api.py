"""The dashboard's JSON API, independent of any web framework: each method returns plain
JSON-ready data or raises :class:`ApiError` with an HTTP status.

Reads use the store's optional capabilities where present (``JobQueryStore`` for the job list,
``JobAnalyticsStore`` for counts, rates and percentiles, ``JobAuditStore`` for executions and
logs, ``ArchiveStore`` for archived jobs); a missing capability leaves that part empty and says
so (``"available": false``). Arguments are shown masked by the ``PayloadMaskingPolicy``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from ratchet_api.errors import RatchetError
from ratchet_api.model import JobPriority, JobStatus, MaskingContext
from ratchet_api.spi.policies import PayloadMaskingPolicy
from ratchet_api.store.entities import JobEntity, JobQuery
from ratchet_api.store.protocols import (
    ArchiveStore,
    JobAnalyticsStore,
    JobAuditStore,
    JobQueryStore,
    JobStore,
    RecurringJobStore,
)
from ratchet_core.enqueue.scheduler import SchedulerService
from ratchet_core.features.recurring.history import misfire_count
from ratchet_core.observability.health import check_health
from ratchet_core.payload.forms import decode_invocation

MASK = "••••••"
ACTIONS = ("retry", "cancel", "pause", "resume", "delete")
PERCENTILES = (50.0, 95.0, 99.0)
MAX_PAGE = 500


class ApiError(Exception):
    """An error answer: HTTP ``status`` and a message for the user."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _seconds(value: timedelta | None) -> float | None:
    return round(value.total_seconds(), 3) if value is not None else None


def _json_or_text(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def summary(job: JobEntity) -> dict[str, Any]:
    """The fields of a job shown in lists."""
    return {
        "id": str(job.id),
        "status": job.status.value,
        "target": job.target,
        "priority": JobPriority(job.priority).name.lower(),
        "attempt": job.attempt,
        "max_retries": job.max_retries,
        "tags": list(job.tags),
        "scheduled_at": _iso(job.scheduled_at),
        "created_at": _iso(job.created_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
        "owner": job.owner,
        "last_error": job.last_error.splitlines()[0][:200] if job.last_error else None,
    }


class DashboardApi:
    """The operations behind the dashboard. Thread safe (holds no mutable state)."""

    def __init__(
        self,
        scheduler: SchedulerService,
        masking: PayloadMaskingPolicy,
        *,
        node_timeout: timedelta = timedelta(seconds=30),
    ) -> None:
        self._scheduler = scheduler
        self._store: JobStore = scheduler.store
        self._masking = masking
        self._node_timeout = node_timeout

    @property
    def scheduler(self) -> SchedulerService:
        return self._scheduler

    @property
    def masking(self) -> PayloadMaskingPolicy:
        return self._masking

    def mask(self, value: Any, context: MaskingContext) -> Any:
        """``value`` with every field the masking policy names sensitive masked, at any depth."""
        return self._mask(value, context)

    def statuses(self, raw: str | None) -> frozenset[JobStatus] | None:
        """Job statuses from a comma-separated list (any case); 400 naming an unknown one."""
        return self._statuses(raw)

    # ------------------------------------------------------------ overview

    def overview(self, window: timedelta = timedelta(hours=1), buckets: int = 12) -> dict[str, Any]:
        """Counts by status, finished jobs per bucket of ``window`` (throughput and failure
        rate), queue-wait and execution-time percentiles over the window."""
        analytics = self._store.capability(JobAnalyticsStore)
        if analytics is None:
            return {"available": False, "counts": {}, "series": [], "window_seconds": 0}
        now = self._store.server_now()
        since = now - window
        counts = {s.value: n for s, n in analytics.count_jobs_by_status().items()}
        step = window / buckets
        # cumulative counts from each bucket start to now; differences give each bucket
        cumulative = [analytics.count_finished_since(since + step * i) for i in range(buckets)]
        series = []
        for i in range(buckets):
            later = cumulative[i + 1] if i + 1 < buckets else {}
            point: dict[str, Any] = {"start": _iso(since + step * i)}
            for status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED):
                point[status.value] = cumulative[i].get(status, 0) - later.get(status, 0)
            series.append(point)
        finished = cumulative[0]
        done = sum(finished.values())
        failed = finished.get(JobStatus.FAILED, 0)
        return {
            "available": True,
            "now": _iso(now),
            "window_seconds": window.total_seconds(),
            "counts": counts,
            "finished": {s.value: n for s, n in finished.items()},
            "throughput_per_minute": round(done / (window.total_seconds() / 60), 3),
            "failure_rate": round(failed / done, 4) if done else 0.0,
            "series": series,
            "queue_wait_seconds": {
                f"p{p:g}": _seconds(analytics.queue_wait_percentile(p, since)) for p in PERCENTILES
            },
            "execution_seconds": {
                f"p{p:g}": _seconds(analytics.execution_time_percentile(p, since))
                for p in PERCENTILES
            },
        }

    # ------------------------------------------------------------ jobs

    def jobs(self, params: Mapping[str, str]) -> dict[str, Any]:
        """A page of jobs: filters ``status`` (comma separated), ``target``, ``tag``, ``q`` (a
        job id, found in the jobs table or the archive), ``limit``, ``offset``; newest first."""
        search = (params.get("q") or "").strip()
        if search:
            try:
                ident = UUID(search)
            except ValueError:
                raise ApiError(400, f"search by job id: {search!r} is not a job id") from None
            found = self._find(ident)
            return {
                "available": True,
                "total": 0 if found is None else 1,
                "jobs": [] if found is None else [summary(found[0])],
            }
        queries = self._store.capability(JobQueryStore)
        if queries is None:
            return {"available": False, "total": 0, "jobs": []}
        query = JobQuery(
            statuses=self._statuses(params.get("status")),
            target=params.get("target") or None,
            tag=params.get("tag") or None,
            limit=self._int(params, "limit", 50, 1, MAX_PAGE),
            offset=self._int(params, "offset", 0, 0, 10**9),
            preview=1,  # a list shows no argument or result: the store need not load them
        )
        return {
            "available": True,
            "total": queries.count_jobs(query),
            "jobs": [summary(j) for j in queries.search_jobs(query)],
        }

    def job(self, job_id: str) -> dict[str, Any]:
        """One job in full: arguments and result (fields the masking policy names sensitive are
        masked, at any depth of a JSON object), error, executions, log lines, children."""
        ident = self._id(job_id)
        found = self._find(ident)
        if found is None:
            raise ApiError(404, f"job {ident} not found")
        job, archived = found
        record = summary(job)
        context = MaskingContext(job_id=job.id)
        record.update(
            archived=archived,
            last_error=job.last_error,
            result=self._mask(_json_or_text(job.result), context),
            idempotency_key=job.idempotency_key,
            execution_target=job.execution_target,
            parent_id=str(job.parent_id) if job.parent_id else None,
            batch_id=str(job.batch_id) if job.batch_id else None,
            recurring_name=job.recurring_name,
            job_type=job.job_type.value,
        )
        try:
            invocation = decode_invocation(job.payload, job.id)
            record["args"] = [self._mask(a, context) for a in invocation.args]
            record["kwargs"] = {
                k: MASK if self._masking.is_sensitive_field(k, context) else self._mask(v, context)
                for k, v in invocation.kwargs.items()
            }
        except RatchetError:
            record["args"] = None
            record["kwargs"] = None
            record["payload_note"] = "arguments not readable (encrypted or another version)"
        audit = self._store.capability(JobAuditStore)
        record["executions"] = [
            {
                "attempt": e.attempt,
                "status": e.status.value,
                "node": e.node_id,
                "started_at": _iso(e.started_at),
                "finished_at": _iso(e.finished_at),
                "duration_ms": e.duration_ms,
                "error": e.error,
            }
            for e in (audit.find_executions_by_job_id(ident) if audit is not None else [])
        ]
        record["logs"] = [
            {
                "at": _iso(line.logged_at),
                "level": line.level.value,
                "attempt": line.attempt,
                "message": line.message,
            }
            for line in (audit.find_logs_by_job_id(ident, 500) if audit is not None else [])
        ]
        record["children"] = (
            [summary(c) for c in self._store.find_children(ident)] if not archived else []
        )
        return record

    def act(self, job_id: str, action: str) -> dict[str, Any]:
        """Apply ``action`` (retry, cancel, pause, resume, delete) to a job; 409 when its status
        does not allow it."""
        if action not in ACTIONS:
            raise ApiError(404, f"unknown action {action!r}; one of {', '.join(ACTIONS)}")
        ident = self._id(job_id)
        try:
            changed = bool(getattr(self._scheduler, action)(ident))
        except RatchetError as exc:
            raise ApiError(404 if isinstance(exc, LookupError) else 400, str(exc)) from None
        job = self._store.find_by_id(ident)
        status = job.status.value if job is not None else None
        if not changed:
            raise ApiError(409, f"job {ident} is {status}: it cannot be {action}d now")
        return {"ok": True, "id": str(ident), "action": action, "status": status}

    # ------------------------------------------------------------ nodes, schedules

    def nodes(self) -> dict[str, Any]:
        now = self._store.server_now()
        nodes = []
        for node in sorted(self._store.find_all_nodes(), key=lambda n: n.node_id):
            age = now - node.last_heartbeat
            nodes.append(
                {
                    "node_id": node.node_id,
                    "host": node.host,
                    "pid": node.pid,
                    "started_at": _iso(node.started_at),
                    "last_heartbeat": _iso(node.last_heartbeat),
                    "heartbeat_age_seconds": round(age.total_seconds(), 1),
                    "alive": age <= self._node_timeout,
                    "running_jobs": node.running_jobs,
                    "tags": list(node.tags),
                }
            )
        return {"nodes": nodes, "node_timeout_seconds": self._node_timeout.total_seconds()}

    def recurring(self) -> dict[str, Any]:
        store = self._store.capability(RecurringJobStore)
        if store is None:
            return {"available": False, "schedules": []}
        return {
            "available": True,
            "schedules": [
                {
                    "name": r.name,
                    "target": r.target,
                    "cron": r.cron,
                    "timezone": r.timezone,
                    "enabled": r.enabled,
                    "next_fire_at": _iso(r.next_fire_at),
                    "last_fired_at": _iso(r.last_fired_at),
                    "misfire_policy": r.misfire_policy.value,
                    # misfire rounds on record (features/recurring/history.py); None: unknown
                    "misfires": misfire_count(self._store, r.name),
                }
                for r in store.list_recurring()
            ],
        }

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Store reachable, schema current, nodes counted (see :mod:`ratchet_core.observability.health`)."""
        report = check_health(self._store, node_timeout=self._node_timeout)
        return report.ok, report.as_dict()

    def prometheus(self) -> str:
        """Gauges in the Prometheus text format: jobs by status, nodes alive and silent, and
        (with the analytics capability) queue wait and run time quantiles over 5 minutes."""
        lines: list[str] = []

        def gauge(name: str, help_text: str, samples: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} gauge")
            lines.extend(f"{name}{labels} {value:g}" for labels, value in samples)

        now = self._store.server_now()
        analytics = self._store.capability(JobAnalyticsStore)
        if analytics is not None:
            counts = analytics.count_jobs_by_status()
            gauge(
                "ratchet_jobs",
                "Jobs in the jobs table by status.",
                [(f'{{status="{s.value}"}}', n) for s, n in sorted(counts.items())],
            )
            since = now - timedelta(minutes=5)
            for name, fn, text in (
                (
                    "ratchet_queue_wait_seconds",
                    analytics.queue_wait_percentile,
                    "Time from due to start of jobs started in the last 5 minutes.",
                ),
                (
                    "ratchet_execution_seconds",
                    analytics.execution_time_percentile,
                    "Run time of jobs that succeeded in the last 5 minutes.",
                ),
            ):
                samples = []
                for p in PERCENTILES:
                    value = fn(p, since)
                    if value is not None:
                        samples.append((f'{{quantile="{p / 100:g}"}}', value.total_seconds()))
                gauge(name, text, samples)
        nodes = self._store.find_all_nodes()
        alive = sum(1 for n in nodes if now - n.last_heartbeat <= self._node_timeout)
        gauge(
            "ratchet_nodes",
            "Worker nodes by heartbeat state.",
            [('{state="alive"}', alive), ('{state="silent"}', len(nodes) - alive)],
        )
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------ helpers

    def _find(self, ident: UUID) -> tuple[JobEntity, bool] | None:
        job = self._store.find_by_id(ident)
        if job is not None:
            return job, False
        archive = self._store.capability(ArchiveStore)
        archived = archive.find_archived_job(ident) if archive is not None else None
        return (archived, True) if archived is not None else None

    def _mask(self, value: Any, context: MaskingContext) -> Any:
        if isinstance(value, dict):
            return {
                k: MASK
                if isinstance(k, str) and self._masking.is_sensitive_field(k, context)
                else self._mask(v, context)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [self._mask(v, context) for v in value]
        return value

    @staticmethod
    def _id(text: str) -> UUID:
        try:
            return UUID(text)
        except ValueError:
            raise ApiError(400, f"{text!r} is not a job id") from None

    @staticmethod
    def _statuses(raw: str | None) -> frozenset[JobStatus] | None:
        if not raw:
            return None
        try:
            return frozenset(JobStatus(s.strip().upper()) for s in raw.split(",") if s.strip())
        except ValueError:
            names = ", ".join(s.value for s in JobStatus)
            raise ApiError(400, f"unknown status in {raw!r}; one of {names}") from None

    @staticmethod
    def _int(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
        raw = params.get(name)
        if raw in (None, ""):
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ApiError(400, f"{name} must be an integer, got {raw!r}") from None
        if not low <= value <= high:
            raise ApiError(400, f"{name} must be between {low} and {high}, got {value}")
        return value


__all__ = ["ACTIONS", "MASK", "ApiError", "DashboardApi", "summary"]
