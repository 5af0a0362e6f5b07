"""The dashboard's operator API (issue 28): batches, workflows, signals, bulk actions, queues
and targets, schedule actions and search. Framework independent like :mod:`.api`: methods
return JSON-ready data or raise :class:`~ratchet_core.dashboard.api.ApiError`.

Every read that the store cannot answer with a query scans a bounded number of the newest rows
and says so (``"scanned"``, ``"truncated"``): the figures of a page are then those of the rows
scanned, never silently partial.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from ratchet_api.errors import RatchetError, UnsupportedCapabilityError
from ratchet_api.model import JobStatus, MaskingContext
from ratchet_api.store.entities import BatchStatus, JobEntity, JobQuery, SortOrder
from ratchet_api.store.protocols import (
    ArchiveStore,
    BatchStore,
    JobQueryStore,
    QueueStatsStore,
    RecurringJobStore,
    WorkflowConditionStore,
)
from ratchet_api.store.queues import QueueCounts
from ratchet_core.dashboard.api import MASK, ApiError, DashboardApi, summary
from ratchet_core.features.recurring.history import history as recurring_history
from ratchet_core.observability.queues import read_queue_stats
from ratchet_core.payload.forms import decode_invocation

BULK_ACTIONS = ("retry", "cancel", "delete", "pause", "resume")
MAX_BULK = 10_000
"""Most jobs one bulk action over a filter changes (a larger set: narrow the filter)."""
SCAN = 2_000
"""Newest rows a text search or a queue page reads when the store has no query for it."""
SCHEDULE_ACTIONS = ("trigger", "pause", "resume")
RECURRING_TAG = "recurring:"


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


class OperatorApi:
    """Reads and actions over one :class:`DashboardApi`'s scheduler and store."""

    def __init__(self, api: DashboardApi) -> None:
        self._api = api
        self._scheduler = api.scheduler
        self._store = api.scheduler.store

    # ------------------------------------------------------------ batches

    def _batches(self) -> BatchStore:
        store = self._store.capability(BatchStore)
        if store is None:
            raise ApiError(404, "the store keeps no batches (no BatchStore capability)")
        return store

    def batches(self, params: Mapping[str, str]) -> dict[str, Any]:
        """Batches newest first (``status``: OPEN, SEALED, COMPLETED...; ``limit``)."""
        store = self._store.capability(BatchStore)
        if store is None:
            return {"available": False, "batches": []}
        raw = (params.get("status") or "").strip().upper()
        try:
            statuses = frozenset({BatchStatus(raw)}) if raw else None
        except ValueError:
            names = ", ".join(s.value for s in BatchStatus)
            raise ApiError(400, f"unknown batch status {raw!r}; one of {names}") from None
        limit = _int(params, "limit", 50, 1, 500)
        batches = store.find_batches(statuses=statuses, limit=limit)
        return {"available": True, "batches": [batch_dict(b) for b in batches]}

    def batch(self, batch_id: str, params: Mapping[str, str]) -> dict[str, Any]:
        """One batch: progress (total, succeeded, failed, pending, percent), its callbacks
        (the jobs released when it completes) and a page of its children (``status``,
        ``limit``, ``offset`` as the job list)."""
        ident = _uuid(batch_id, "batch")
        batch = self._batches().find_batch(ident)
        if batch is None:
            raise ApiError(404, f"batch {ident} not found")
        record = batch_dict(batch)
        record["callbacks"] = (
            [summary(j) for j in self._store.find_children(batch.parent_job_id)]
            if batch.parent_job_id is not None
            else []
        )
        queries = self._store.capability(JobQueryStore)
        if queries is None:
            record["children"] = {"available": False, "total": 0, "jobs": []}
            return record
        query = JobQuery(
            batch_id=ident,
            statuses=self._api.statuses(params.get("status")),
            limit=_int(params, "limit", 50, 1, 500),
            offset=_int(params, "offset", 0, 0, 10**9),
            order=SortOrder.OLDEST_FIRST,
        )
        record["children"] = {
            "available": True,
            "total": queries.count_jobs(query),
            "jobs": [summary(j) for j in queries.search_jobs(query)],
        }
        return record

    # ------------------------------------------------------------ workflows

    def workflow(self, job_id: str) -> dict[str, Any]:
        """The workflow around a job as a graph: its root (the topmost parent), every job
        below it (at most 500) as ``nodes`` and parent -> child ``edges`` with the condition
        that releases the child while it is known (``ON_SUCCESS``, ``ON_FAILURE``,
        ``ALWAYS``, ``CUSTOM`` for a branch predicate). A child still WAITING waits on its
        parent; a CANCELLED one is a branch not taken (or cancelled)."""
        ident = _uuid(job_id, "job")
        job = self._store.find_by_id(ident)
        if job is None:
            raise ApiError(404, f"job {ident} not found")
        root = job
        seen = {root.id}
        while root.parent_id is not None and root.parent_id not in seen:
            parent = self._store.find_by_id(root.parent_id)
            if parent is None:
                break
            seen.add(parent.id)
            root = parent
        conditions = self._store.capability(WorkflowConditionStore)
        nodes: list[dict[str, Any]] = []
        edges: list[dict[str, Any]] = []
        frontier = [(root, 0)]
        visited: set[UUID] = set()
        while frontier and len(nodes) < 500:
            current, depth = frontier.pop(0)
            if current.id in visited:
                continue
            visited.add(current.id)
            node = summary(current)
            node.update(depth=depth, job_type=current.job_type.value)
            node["signal_key"] = current.signal_key
            nodes.append(node)
            kinds = {}
            if conditions is not None:
                kinds = {
                    c.child_job_id: (c.kind.value, c.position)
                    for c in conditions.find_conditions_by_parent(current.id)
                }
            for child in self._store.find_children(current.id):
                kind, position = kinds.get(child.id, (None, None))
                edges.append(
                    {
                        "from": str(current.id),
                        "to": str(child.id),
                        "condition": kind,
                        "position": position,
                        "state": _edge_state(child.status),
                    }
                )
                frontier.append((child, depth + 1))
        return {
            "job_id": str(ident),
            "root_id": str(root.id),
            "nodes": nodes,
            "edges": edges,
            "truncated": bool(frontier),
        }

    # ------------------------------------------------------------ signals

    def signals(self, params: Mapping[str, str]) -> dict[str, Any]:
        """Jobs waiting for a signal, oldest first, with their key and deadline (``key``
        filters on one signal key)."""
        queries = self._store.capability(JobQueryStore)
        if queries is None:
            return {"available": False, "total": 0, "jobs": []}
        query = JobQuery(
            statuses=frozenset({JobStatus.AWAITING_SIGNAL}),
            limit=_int(params, "limit", 100, 1, 500),
            offset=_int(params, "offset", 0, 0, 10**9),
            order=SortOrder.OLDEST_FIRST,
        )
        key = (params.get("key") or "").strip()
        jobs = queries.search_jobs(query)
        if key:
            jobs = [j for j in jobs if j.signal_key == key]
        now = self._store.server_now()
        rows = []
        for job in jobs:
            row = summary(job)
            row["signal_key"] = job.signal_key
            row["signal_deadline"] = _iso(job.signal_deadline)
            row["seconds_left"] = (
                round((job.signal_deadline - now).total_seconds(), 1)
                if job.signal_deadline is not None
                else None
            )
            rows.append(row)
        return {"available": True, "total": queries.count_jobs(query), "jobs": rows}

    @staticmethod
    def signal_target(body: Mapping[str, Any]) -> UUID | str:
        """The job id (``job_id``) or signal key (``key``) a signal request names."""
        return _signal_target(body)

    def send_signal(self, target: UUID | str, payload: Any) -> dict[str, Any]:
        """Deliver ``payload`` (any JSON value) to the job ``target`` (an id) or to every job
        waiting on the signal key ``target``."""
        try:
            decision = self._scheduler.signal(target, payload)
        except UnsupportedCapabilityError as exc:
            raise ApiError(404, str(exc)) from None
        except RatchetError as exc:
            raise ApiError(400, str(exc)) from None
        return {
            "target": decision.target,
            "outcome": decision.outcome.value,
            "delivered": decision.delivered,
            "jobs": {str(k): v.value for k, v in decision.jobs.items()},
        }

    # ------------------------------------------------------------ bulk

    def bulk_selection(self, body: Mapping[str, Any]) -> tuple[str, list[UUID] | None, JobQuery]:
        """``(action, ids or None, filter query)`` of a bulk request: ``{"action": ...,
        "ids": [...]}`` or ``{"action": ..., "filter": {"status": ..., "target": ...,
        "tag": ...}}``."""
        action = body.get("action")
        if action not in BULK_ACTIONS:
            raise ApiError(400, f"bulk action must be one of {', '.join(BULK_ACTIONS)}")
        ids = body.get("ids")
        raw_filter = body.get("filter")
        if (ids is None) == (raw_filter is None):
            raise ApiError(400, 'a bulk action takes either "ids" or "filter"')
        if ids is not None:
            if not isinstance(ids, list) or not ids or len(ids) > MAX_BULK:
                raise ApiError(400, f'"ids" must be a list of 1 to {MAX_BULK} job ids')
            return action, [_uuid(str(i), "job") for i in ids], JobQuery()
        if not isinstance(raw_filter, dict):
            raise ApiError(400, '"filter" must be an object of status, target and tag')
        query = JobQuery(
            statuses=self._api.statuses(_text(raw_filter, "status")),
            target=_text(raw_filter, "target"),
            tag=_text(raw_filter, "tag"),
            limit=MAX_BULK,
        )
        return action, None, query

    def bulk_count(self, query: JobQuery) -> int:
        """How many jobs a filter selects (what the confirmation shows)."""
        queries = self._store.capability(JobQueryStore)
        if queries is None:
            raise ApiError(404, "the store cannot select jobs by filter (no JobQueryStore)")
        return queries.count_jobs(query)

    def bulk(
        self, action: str, ids: list[UUID] | None, query: JobQuery, confirm: Any
    ) -> dict[str, Any]:
        """Apply ``action`` to the selected jobs. A filter selection must carry ``confirm``,
        the count the operator confirmed: when the filter selects another number now (jobs
        came or went), nothing is done (409, with the new count). Jobs whose status does
        not allow the action are counted as ``skipped``."""
        if ids is None:
            matched = self.bulk_count(query)
            if confirm != matched:
                raise ApiError(
                    409,
                    f"the filter selects {matched} jobs now, not {confirm!r}: confirm that "
                    "number (send it as confirm)",
                )
            if matched > MAX_BULK:
                raise ApiError(400, f"{matched} jobs: at most {MAX_BULK} per bulk action")
            ids = self._ids_of(query)
        apply: Callable[[UUID], bool] = getattr(self._scheduler, action)
        changed = skipped = missing = 0
        for ident in ids:
            try:
                if apply(ident):
                    changed += 1
                else:
                    skipped += 1
            except LookupError:
                missing += 1
            except RatchetError:
                skipped += 1
        return {
            "action": action,
            "selected": len(ids),
            "changed": changed,
            "skipped": skipped,
            "missing": missing,
        }

    def _ids_of(self, query: JobQuery) -> list[UUID]:
        queries = self._store.capability(JobQueryStore)
        assert queries is not None  # bulk_count checked it
        ids: list[UUID] = []
        page = 1000
        offset = 0
        while len(ids) < MAX_BULK:
            jobs = queries.search_jobs(
                JobQuery(
                    statuses=query.statuses,
                    target=query.target,
                    tag=query.tag,
                    limit=page,
                    offset=offset,
                    order=SortOrder.OLDEST_FIRST,
                )
            )
            ids.extend(j.id for j in jobs)
            if len(jobs) < page:
                break
            offset += page
        return ids[:MAX_BULK]

    # ------------------------------------------------------------ queues and targets

    def queues(self, params: Mapping[str, str]) -> dict[str, Any]:
        """Per execution target label (``""``: jobs without one) and per job target: depth
        (PENDING), due now, age of the oldest due job, running, and over ``window`` seconds
        (default 3600) the finished jobs per minute and the failure rate. One
        ``QueueStatsStore`` read (:func:`~ratchet_core.observability.queues.read_queue_stats`);
        a store without it is scanned (the newest :data:`SCAN` rows of each kind, ``truncated``
        says when there were more). Targets cannot be paused from here: no store keeps a
        per-target pause (``pause`` says so); pause single jobs, or stop the workers of a
        label."""
        if (
            self._store.capability(QueueStatsStore) is None
            and self._store.capability(JobQueryStore) is None
        ):
            return {"available": False, "labels": [], "targets": []}
        window = timedelta(seconds=_int(params, "window", 3600, 60, 31 * 86400))
        now = self._store.server_now()
        stats = read_queue_stats(self._store, now - window, scan=SCAN)
        minutes = window.total_seconds() / 60

        def rows(groups: Mapping[str, QueueCounts]) -> list[dict[str, Any]]:
            out = []
            for name, c in sorted(groups.items()):
                finished = c.succeeded + c.failed
                oldest = stats.oldest_due_age(c).total_seconds() if c.due else None
                out.append(
                    {
                        "name": name,
                        "depth": c.pending,
                        "due": c.due,
                        "oldest_due_seconds": round(oldest, 1) if oldest is not None else None,
                        "running": c.running,
                        "finished": finished,
                        "failed": c.failed,
                        "per_minute": round(finished / minutes, 3),
                        "failure_rate": round(c.failed / finished, 4) if finished else 0.0,
                    }
                )
            return out

        return {
            "available": True,
            "window_seconds": window.total_seconds(),
            "exact": stats.exact,
            "scanned": stats.scanned or 0,
            "truncated": not stats.exact,
            "labels": rows(stats.grouped(lambda r: r.execution_target or "")),
            "targets": rows(stats.grouped(lambda r: r.target)),
            "pause": {
                "supported": False,
                "reason": "the stores keep no per-target pause: pause jobs (bulk pause of a "
                "filter) or stop the workers that run the label",
            },
        }

    # ------------------------------------------------------------ schedules

    def schedule(self, name: str) -> dict[str, Any]:
        """One recurring definition with its recent firings (the 20 latest slots it fired, a
        misfire round marked: features/recurring/history.py) and its misfire count."""
        recurring = self._store.capability(RecurringJobStore)
        if recurring is None:
            raise ApiError(404, "the store keeps no recurring definitions")
        definition = recurring.find_recurring(name)
        if definition is None:
            raise ApiError(404, f"no recurring definition {name!r}")
        seen = recurring_history(self._store, name, limit=20)
        return {
            "name": definition.name,
            "target": definition.target,
            "cron": definition.cron,
            "timezone": definition.timezone,
            "enabled": definition.enabled,
            "misfire_policy": definition.misfire_policy.value,
            "next_fire_at": _iso(definition.next_fire_at),
            "last_fired_at": _iso(definition.last_fired_at),
            "misfires": seen.misfires,
            "firings": [f.as_json() for f in seen.firings],
        }

    def schedule_action(self, name: str, action: str) -> dict[str, Any]:
        """``trigger`` (run once now; the job id), ``pause`` or ``resume`` a definition."""
        if action not in SCHEDULE_ACTIONS:
            raise ApiError(
                404, f"unknown schedule action {action!r}; one of trigger, pause, resume"
            )
        service = self._scheduler.recurring_jobs
        try:
            if action == "trigger":
                job_id = service.trigger_now(name)
                return {"ok": True, "name": name, "action": action, "job_id": str(job_id)}
            changed = service.pause(name) if action == "pause" else service.resume(name)
        except LookupError as exc:
            raise ApiError(404, str(exc)) from None
        except RatchetError as exc:
            raise ApiError(400, str(exc)) from None
        return {"ok": True, "name": name, "action": action, "changed": bool(changed)}

    # ------------------------------------------------------------ search

    def search(self, text: str, limit: int = 50) -> dict[str, Any]:
        """Jobs found by ``text``: a job id (hot or archived), an idempotency key, a tag or a
        target (exactly), then the error text and argument values of the newest :data:`SCAN`
        jobs and archived jobs (substring, case-insensitive). Arguments are searched as the
        dashboard shows them, masked: a value under a sensitive field is never matched."""
        text = text.strip()
        found: dict[UUID, dict[str, Any]] = {}

        def add(job: JobEntity, how: str, archived: bool = False) -> None:
            if job.id not in found and len(found) < limit:
                row = summary(job)
                row.update(matched_by=how, archived=archived)
                found[job.id] = row

        try:
            ident: UUID | None = UUID(text)
        except ValueError:
            ident = None
        if ident is not None:
            hit = self._store.find_by_id(ident)
            if hit is not None:
                add(hit, "id")
            archive = self._store.capability(ArchiveStore)
            old = archive.find_archived_job(ident) if archive is not None else None
            if old is not None:
                add(old, "id", archived=True)
            return _search_answer(text, found, 0)
        keyed = self._store.find_by_idempotency_key(text)
        if keyed is not None:
            add(keyed, "idempotency_key")
        queries = self._store.capability(JobQueryStore)
        scanned = 0
        if queries is not None:
            for job in queries.search_jobs(JobQuery(tag=text, limit=limit)):
                add(job, "tag")
            for job in queries.search_jobs(JobQuery(target=text, limit=limit)):
                add(job, "target")
            newest = queries.search_jobs(JobQuery(limit=SCAN))
            scanned += len(newest)
            self._scan(newest, text, add, archived=False)
        archive = self._store.capability(ArchiveStore)
        if archive is not None:
            old_jobs = archive.find_archived_jobs(SCAN)
            scanned += len(old_jobs)
            self._scan(old_jobs, text, add, archived=True)
        return _search_answer(text, found, scanned)

    def _scan(
        self,
        jobs: list[JobEntity],
        text: str,
        add: Callable[[JobEntity, str, bool], None],
        *,
        archived: bool,
    ) -> None:
        needle = text.casefold()
        for job in jobs:
            if job.last_error and needle in job.last_error.casefold():
                add(job, "error", archived)
            elif needle in self._shown_arguments(job).casefold():
                add(job, "arguments", archived)

    def _shown_arguments(self, job: JobEntity) -> str:
        try:
            invocation = decode_invocation(job.payload, job.id)
        except RatchetError:
            return ""  # encrypted or unreadable: nothing to search
        context = MaskingContext(job_id=job.id)
        masking = self._api.masking
        shown = {
            "args": [self._api.mask(a, context) for a in invocation.args],
            "kwargs": {
                k: MASK if masking.is_sensitive_field(k, context) else self._api.mask(v, context)
                for k, v in invocation.kwargs.items()
            },
        }
        return json.dumps(shown, default=str, ensure_ascii=False)


def batch_dict(batch: Any) -> dict[str, Any]:
    """The fields of a batch, with ``pending`` and ``percent`` finished."""
    return {
        "id": str(batch.id),
        "name": batch.name,
        "status": batch.status.value,
        "total": batch.total,
        "succeeded": batch.succeeded,
        "failed": batch.failed,
        "pending": batch.pending,
        "percent": round(100 * batch.finished / batch.total, 1) if batch.total else 0.0,
        "parent_job_id": str(batch.parent_job_id) if batch.parent_job_id else None,
        "created_at": _iso(batch.created_at),
        "completed_at": _iso(batch.completed_at),
        "last_error": batch.last_error,
    }


def _edge_state(status: JobStatus) -> str:
    if status is JobStatus.WAITING:
        return "waiting"
    if status is JobStatus.CANCELLED:
        return "not taken"
    return "released"


def _search_answer(text: str, found: dict[UUID, dict[str, Any]], scanned: int) -> dict[str, Any]:
    return {
        "available": True,
        "q": text,
        "total": len(found),
        "jobs": list(found.values()),
        "scanned": scanned,
    }


def _signal_target(body: Mapping[str, Any]) -> UUID | str:
    job_id, key = body.get("job_id"), body.get("key")
    if (job_id is None) == (key is None):
        raise ApiError(400, 'a signal names either "job_id" or "key"')
    if job_id is not None:
        return _uuid(str(job_id), "job")
    if not isinstance(key, str) or not key.strip():
        raise ApiError(400, '"key" must be a non-empty signal key')
    return key.strip()


def _text(values: Mapping[str, Any], name: str) -> str | None:
    value = values.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ApiError(400, f"filter {name} must be a string")
    return value.strip() or None


def _uuid(text: str, what: str) -> UUID:
    try:
        return UUID(text.strip())
    except ValueError:
        raise ApiError(400, f"{text!r} is not a {what} id") from None


def _int(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = params.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(str(raw))
    except ValueError:
        raise ApiError(400, f"{name} must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise ApiError(400, f"{name} must be between {low} and {high}, got {value}")
    return value


__all__ = ["BULK_ACTIONS", "MAX_BULK", "SCAN", "OperatorApi", "batch_dict"]
