"""Mapping between store entities and BSON documents (a private cattrs converter).

Rules every document follows:

* the entity's identity is the document's ``_id`` (job/batch/condition/execution ``id``, node
  ``node_id``, recurring ``name``, lock ``name``);
* UUIDs are BSON binary subtype 4 (``uuidRepresentation="standard"``);
* datetimes are BSON dates, which hold milliseconds: every datetime is truncated to the
  millisecond on its way in (``to_bson_datetime``), so that a value read back equals the value
  written and comparisons made by the server agree with comparisons made in Python;
* enums are stored by value; every field of the entity is present (``None`` as BSON null).

Reading is strict: a missing field, an unknown enum value or a wrong type raises
``StoreDataError`` naming the field (and the job id for job documents); nothing is coerced.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar
from uuid import UUID

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from ratchet_api.errors import StoreDataError
from ratchet_api.model import JobPriority, JobStatus, JobType
from ratchet_api.store.conversion import first_invalid_field
from ratchet_api.store.entities import (
    BatchEntity,
    BatchStatus,
    ConditionKind,
    ExecutionRecord,
    JobEntity,
    JobLogLine,
    LockEntity,
    LogLevel,
    MisfirePolicy,
    NodeEntity,
    RecurringJobEntity,
    WorkflowConditionEntity,
)

T = TypeVar("T")

_ENUMS: tuple[type[enum.Enum], ...] = (
    JobStatus,
    JobPriority,
    JobType,
    BatchStatus,
    ConditionKind,
    LogLevel,
    MisfirePolicy,
)

_ID_FIELD: dict[type, str] = {
    JobEntity: "id",
    BatchEntity: "id",
    WorkflowConditionEntity: "id",
    ExecutionRecord: "id",
    NodeEntity: "node_id",
    RecurringJobEntity: "name",
    LockEntity: "name",
}


def to_bson_datetime(value: datetime, field: str = "datetime") -> datetime:
    """``value`` as aware UTC truncated to the millisecond (what a BSON date can hold).

    Raises ``StoreDataError`` for a naive or non-UTC datetime."""
    if not isinstance(value, datetime):
        raise StoreDataError(field, f"expected a datetime, got {type(value).__name__}")
    offset = value.utcoffset()
    if offset is None or offset.total_seconds():
        raise StoreDataError(
            field,
            f"must be a timezone-aware UTC datetime, got {value!r} "
            "(use datetime.now(timezone.utc))",
        )
    return value.replace(microsecond=value.microsecond // 1000 * 1000, tzinfo=UTC)


def _strict(kind: type[T]) -> Any:
    def hook(value: Any, _: Any) -> T:
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__} {value!r}")
        return value

    return hook


def _structure_datetime(value: Any, _: Any) -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"expected a BSON date, got {type(value).__name__} {value!r}")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _structure_enum(value: Any, cls: type[enum.Enum]) -> enum.Enum:
    base = int if issubclass(cls, int) else str
    if not isinstance(value, base) or isinstance(value, bool):
        raise TypeError(f"expected a {cls.__name__} value, got {type(value).__name__} {value!r}")
    try:
        return cls(value)
    except ValueError:
        known = ", ".join(str(m.value) for m in cls)
        raise ValueError(f"{value!r} is not a {cls.__name__} (one of {known})") from None


def _structure_str_tuple(value: Any, _: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"expected an array of strings, got {type(value).__name__}")
    for item in value:
        if not isinstance(item, str):
            raise TypeError(f"expected an array of strings, found {type(item).__name__} {item!r}")
    return tuple(value)


def _build_converter() -> cattrs.Converter:
    conv = cattrs.Converter(detailed_validation=True)
    conv.register_structure_hook(str, _strict(str))
    conv.register_structure_hook(int, _strict(int))
    conv.register_structure_hook(bool, _strict(bool))
    conv.register_structure_hook(UUID, _strict(UUID))
    conv.register_structure_hook(datetime, _structure_datetime)
    for enum_cls in _ENUMS:
        conv.register_structure_hook(enum_cls, _structure_enum)
    conv.register_structure_hook_func(lambda t: t == tuple[str, ...], _structure_str_tuple)
    conv.register_unstructure_hook(datetime, to_bson_datetime)
    conv.register_unstructure_hook(UUID, lambda value: value)
    conv.register_unstructure_hook_func(lambda t: t == tuple[str, ...], list)
    for cls, id_field in _ID_FIELD.items():
        renames = {id_field: override(rename="_id")}
        conv.register_structure_hook(cls, make_dict_structure_fn(cls, conv, **renames))  # type: ignore[arg-type]
        conv.register_unstructure_hook(cls, make_dict_unstructure_fn(cls, conv, **renames))  # type: ignore[arg-type]
    return conv


_converter = _build_converter()


def _keys(cls: type) -> list[str]:
    id_field = _ID_FIELD.get(cls)
    return ["_id" if f.name == id_field else f.name for f in attrs.fields(cls)]


_KEYS: dict[type, list[str]] = {cls: _keys(cls) for cls in (*_ID_FIELD, JobLogLine)}


def from_document(cls: type[T], doc: Mapping[str, Any], *, writing: bool = False) -> T:
    """Build an entity from a stored document; ``StoreDataError`` names what is wrong."""
    job_id = doc.get("_id") if cls is JobEntity and isinstance(doc.get("_id"), UUID) else None
    for key in _KEYS[cls]:
        if key not in doc:
            raise StoreDataError(
                key, f"missing from the stored {cls.__name__} document", job_id=job_id
            )
    try:
        return _converter.structure(doc, cls)
    except (cattrs.BaseValidationError, ValueError, TypeError) as exc:
        field, cause = first_invalid_field(exc)
        reason = f"{type(cause).__name__}: {cause}"
        if field == "id" and cls is JobEntity:
            field = "_id"
        what = "invalid value" if writing else "invalid stored value"
        raise StoreDataError(field, f"{what}: {reason}", job_id=job_id) from exc


def _reason(exc: StoreDataError) -> str:
    return str(exc).split(": ", 1)[1] if ": " in str(exc) else str(exc)


def to_document(entity: object) -> dict[str, Any]:
    """The document of ``entity`` (datetimes truncated to milliseconds).

    The document is read back through ``from_document`` before it is returned, so a value
    that could not be read later (a status that is not a ``JobStatus``, a string where a number
    belongs) is refused now with ``StoreDataError``, before anything is written."""
    job_id = entity.id if isinstance(entity, JobEntity) else None
    cls: Any = type(entity)
    for attribute in attrs.fields(cls):
        value = getattr(entity, attribute.name)
        if isinstance(value, datetime):
            try:
                to_bson_datetime(value, attribute.name)
            except StoreDataError as exc:
                raise StoreDataError(attribute.name, _reason(exc), job_id=job_id) from None
    doc: dict[str, Any] = _converter.unstructure(entity, unstructure_as=type(entity))
    from_document(type(entity), doc, writing=True)
    return doc


def job_to_document(job: JobEntity) -> dict[str, Any]:
    """A new job document: the entity's fields, tags sorted and de-duplicated, and the embedded
    extension data (``props``: write-once properties, ``state``: versioned namespaces)."""
    doc = to_document(job)
    doc["tags"] = sorted(set(job.tags))
    doc["props"] = []
    doc["state"] = []
    return doc


def job_from_document(doc: Mapping[str, Any]) -> JobEntity:
    """The job of a stored document, tags sorted (as ``find_tags`` returns them)."""
    job = from_document(JobEntity, doc)
    tags = tuple(sorted(set(job.tags)))
    if tags == job.tags:
        return job
    changes: dict[str, Any] = {"tags": tags}
    return attrs.evolve(job, **changes)


__all__ = [
    "from_document",
    "job_from_document",
    "job_to_document",
    "to_bson_datetime",
    "to_document",
]
