"""The attempts of a Django task as Ratchet stores them: when each attempt started and
finished, on which worker, and the error of each failed one.

Times and workers come from the execution records (``JobAuditStore``: one per finished
attempt, ``started_at`` when the attempt began running, not when it was claimed). The error of a
failed attempt is written by :func:`record_failure` on the worker as the job property
``django.error.<attempt>`` (``JobExtensionStore``): the exception's class path and its sanitized
traceback. Without these capabilities the job's own fields are used (claim time, last error).
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any
from uuid import UUID

import attrs

from ratchet_api.model import JobStatus
from ratchet_api.store.entities import ExecutionRecord, JobEntity
from ratchet_api.store.protocols import JobAuditStore, JobExtensionStore, JobStore

ERROR_PROPERTY = "django.error."
"""Prefix of the job properties holding each failed attempt's error (``django.error.3``)."""

_log = logging.getLogger("ratchet.django")


@attrs.frozen(kw_only=True)
class AttemptError:
    exception_class_path: str
    traceback: str


@attrs.frozen(kw_only=True)
class TaskHistory:
    started_at: datetime | None
    """When the first attempt began running."""
    last_attempted_at: datetime | None
    """When the latest attempt began running."""
    finished_at: datetime | None
    worker_ids: list[str]
    errors: list[AttemptError]


def record_failure(
    store: JobStore, job_id: UUID, attempt: int, exception_class_path: str, traceback: str
) -> None:
    """Keep a failed attempt's error for ``get_result`` (best effort: a store without
    ``JobExtensionStore``, or a failing write, leaves the job's last error as the only one)."""
    extension = store.capability(JobExtensionStore)
    if extension is None:
        return
    value = json.dumps({"exception_class_path": exception_class_path, "traceback": traceback})
    try:
        extension.put_property(job_id, f"{ERROR_PROPERTY}{attempt}", value)
    except Exception:  # noqa: BLE001 - the attempt's outcome must not depend on this
        _log.warning("could not keep the error of attempt %d of job %s", attempt, job_id)


def task_history(store: JobStore, entity: JobEntity) -> TaskHistory:
    """The attempts of ``entity`` as far as the store keeps them."""
    audit = store.capability(JobAuditStore)
    records: list[ExecutionRecord] = (
        audit.find_executions_by_job_id(entity.id) if audit is not None and entity.attempt else []
    )
    records = [r for r in records if r.attempt <= entity.attempt]
    starts = [r.started_at for r in records]
    workers = [r.node_id for r in records]
    if entity.status is JobStatus.RUNNING and entity.attempt not in {r.attempt for r in records}:
        # the running attempt has no record until it ends: its claim is the best start we know
        if entity.started_at is not None:
            starts.append(entity.started_at)
        workers.append(entity.owner or "ratchet")
    if not records and not starts and entity.started_at is not None:
        starts.append(entity.started_at)
    if not workers and entity.attempt:
        workers = [entity.owner or "ratchet"] * entity.attempt
    # the record's time is when the attempt ended; the job's may be the later batched write
    last = records[-1] if records else None
    finished = last.finished_at if last is not None and last.attempt == entity.attempt else None
    return TaskHistory(
        started_at=starts[0] if starts else None,
        last_attempted_at=starts[-1] if starts else None,
        finished_at=finished or entity.finished_at,
        worker_ids=workers,
        errors=_errors(store, entity, records),
    )


def _errors(
    store: JobStore, entity: JobEntity, records: list[ExecutionRecord]
) -> list[AttemptError]:
    kept: dict[int, AttemptError] = {}
    extension = store.capability(JobExtensionStore)
    if extension is not None:
        for key, value in extension.get_properties_by_prefix(entity.id, ERROR_PROPERTY).items():
            error = _parse(key, value)
            if error is not None:
                kept[error[0]] = error[1]
    errors: list[AttemptError] = []
    for record in records:
        if record.status is not JobStatus.FAILED:
            continue
        if record.attempt in kept:
            errors.append(kept.pop(record.attempt))
        elif record.error:
            errors.append(from_message(record.error))
    # attempts whose error was kept but whose execution record is missing (no audit capability)
    errors.extend(kept[attempt] for attempt in sorted(kept))
    if not errors and entity.last_error and entity.status is not JobStatus.SUCCEEDED:
        errors.append(from_message(entity.last_error))
    return errors


def _parse(key: str, value: str) -> tuple[int, AttemptError] | None:
    try:
        attempt = int(key[len(ERROR_PROPERTY) :])
        data: Any = json.loads(value)
        return attempt, AttemptError(
            exception_class_path=str(data["exception_class_path"]),
            traceback=str(data["traceback"]),
        )
    except (ValueError, KeyError, TypeError):
        return None


def from_message(error: str) -> AttemptError:
    """An error stored as text (``"ValueError: bad"``, or a traceback) as an ``AttemptError``."""
    return AttemptError(exception_class_path=exception_class_path(error), traceback=error)


def exception_class_path(error: str) -> str:
    """The dotted exception class named by a stored error (``"mypkg.errors.PaymentError: card
    declined"``, ``"ValueError: bad"``, or the last line of a traceback); builtins get the
    ``builtins.`` prefix Django's ``TaskError.exception_class`` imports."""
    lines = [line for line in error.strip().splitlines() if line and not line[0].isspace()]
    if lines and lines[0].startswith("Traceback"):
        lines = [
            line for line in lines if not line.startswith(("Traceback", "The above", "During"))
        ]
        head = lines[-1] if lines else ""
    else:
        head = lines[0] if lines else ""
    name = head.split(":", 1)[0].strip()
    if not name or " " in name:
        return "builtins.Exception"
    return name if "." in name else f"builtins.{name}"


__all__ = [
    "ERROR_PROPERTY",
    "AttemptError",
    "TaskHistory",
    "exception_class_path",
    "from_message",
    "record_failure",
    "task_history",
]
