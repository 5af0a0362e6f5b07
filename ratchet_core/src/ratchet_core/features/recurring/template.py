"""The job a recurring definition fires, stored in ``RecurringJobEntity.payload``.

The store keeps the definition's schedule, priority and retries in their own columns; the rest
of the job (the encoded invocation and the builder options) travels as one versioned JSON
document that the store does not interpret::

    {"v": 1, "invocation": "<encoded JobInvocation>", "tags": [...], "backoff": "<encoded>",
     "execution_target": "reports", "max_instances": 1}
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import attrs

from ratchet_api.errors import PayloadError
from ratchet_api.ids import uuid7
from ratchet_api.model import JobStatus, JobType
from ratchet_api.store.entities import JobEntity, RecurringJobEntity
from ratchet_core.payload.forms import dumps_compact

TEMPLATE_FORMAT_VERSION = 1
TAG_PREFIX = "recurring:"
"""Every fired job carries the tag ``recurring:<id>`` (find a definition's runs by tag)."""
MAX_ID_LENGTH = 100
"""Room for the tag and the per-slot idempotency key within the stores' limits."""


@attrs.frozen(kw_only=True)
class JobTemplate:
    invocation: str
    tags: tuple[str, ...] = ()
    backoff: str | None = None
    execution_target: str | None = None
    max_instances: int | None = None

    def encode(self) -> str:
        return dumps_compact(
            {
                "v": TEMPLATE_FORMAT_VERSION,
                "invocation": self.invocation,
                "tags": list(self.tags),
                "backoff": self.backoff,
                "execution_target": self.execution_target,
                "max_instances": self.max_instances,
            }
        )


def decode_template(definition: RecurringJobEntity) -> JobTemplate:
    """The template of a stored definition; ``PayloadError`` names the definition."""
    try:
        doc: Any = json.loads(definition.payload)
        if not isinstance(doc, dict) or doc.get("v") != TEMPLATE_FORMAT_VERSION:
            raise ValueError(f"format version {doc.get('v') if isinstance(doc, dict) else doc!r}")
        invocation = doc["invocation"]
        if not isinstance(invocation, str):
            raise ValueError("invocation is not a string")
        max_instances = doc.get("max_instances")
        if max_instances is not None and (type(max_instances) is not int or max_instances < 1):
            raise ValueError(f"max_instances {max_instances!r}")
        return JobTemplate(
            invocation=invocation,
            tags=tuple(str(t) for t in doc.get("tags") or ()),
            backoff=doc.get("backoff"),
            execution_target=doc.get("execution_target"),
            max_instances=max_instances,
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise PayloadError(
            f"stored recurring job {definition.name!r} has an unreadable payload ({exc}); "
            "declare it again"
        ) from exc


def run_tag(recurring_id: str) -> str:
    return f"{TAG_PREFIX}{recurring_id}"


def slot_key(recurring_id: str, slot: datetime) -> str:
    """The idempotency key of the job fired for ``slot``: one job per definition and slot."""
    return f"{TAG_PREFIX}{recurring_id}@{slot.astimezone(UTC).isoformat(timespec='microseconds')}"


def job_for(
    definition: RecurringJobEntity,
    template: JobTemplate,
    *,
    slot: datetime | None,
    now: datetime,
) -> JobEntity:
    """The job fired for ``slot`` (keyed, due at the slot time), or for a manual trigger
    (``slot=None``: not keyed, due now)."""
    return JobEntity(
        id=uuid7(),
        status=JobStatus.PENDING,
        priority=definition.priority,
        job_type=JobType.RECURRING,
        target=definition.target,
        payload=template.invocation,
        scheduled_at=slot if slot is not None else now,
        created_at=now,
        updated_at=now,
        max_retries=definition.max_retries,
        backoff=template.backoff,
        idempotency_key=slot_key(definition.name, slot) if slot is not None else None,
        execution_target=template.execution_target,
        tags=(*template.tags, run_tag(definition.name)),
        recurring_name=definition.name,
    )


__all__ = [
    "MAX_ID_LENGTH",
    "JobTemplate",
    "decode_template",
    "job_for",
    "run_tag",
    "slot_key",
]
