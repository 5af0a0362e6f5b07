"""Rows <-> entities through a private cattrs converter (as the Mongo store's ``documents.py``).

A row's columns carry the entity's field names. Enums are stored by value (``priority`` as its
int), datetimes as given by ``UtcDateTime`` (aware UTC), UUIDs as ``Uuid``; job tags live in
their own table and are not part of a job row; a node's tags are a JSON array.

Reading is strict and names what is wrong: an unknown enum value or an invalid stored value is
a ``StoreDataError`` naming the column (and the job), never a bare ``ValueError``. Rows are
structured by a converter without detailed validation (the claim path maps every claimed row);
only a row that fails is structured again by a detailed one to name the column.
"""

from __future__ import annotations

import enum
import functools
import json
import operator
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from uuid import UUID

import attrs
import cattrs
import sqlalchemy as sa
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
from ratchet_store_sql import schema as s

E = TypeVar("E", bound=enum.Enum)
T = TypeVar("T")
Row = Mapping[Any, Any]
"""A database row (``RowMapping``) or a plain dict."""

JOB_FIELDS = tuple(f.name for f in attrs.fields(JobEntity) if f.name != "tags")
"""The columns of a job row, in the entity's field order."""

_ENUMS: tuple[type[enum.Enum], ...] = (
    JobStatus,
    JobPriority,
    JobType,
    BatchStatus,
    ConditionKind,
    LogLevel,
    MisfirePolicy,
)
_ENTITIES: tuple[type, ...] = (
    JobEntity,
    NodeEntity,
    RecurringJobEntity,
    BatchEntity,
    WorkflowConditionEntity,
    LockEntity,
    ExecutionRecord,
    JobLogLine,
)
# Fields a row does not hold (job tags: their own table) or the store sets itself (a node's
# last heartbeat: the store's clock).
_OMITTED_ON_WRITE: dict[type, tuple[str, ...]] = {
    JobEntity: ("tags",),
    NodeEntity: ("last_heartbeat",),
}


def enum_value(kind: type[E], value: Any, field: str, job_id: UUID | None = None) -> E:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in kind)
        raise StoreDataError(
            field, f"unknown value {value!r} (expected one of {allowed})", job_id=job_id
        ) from None


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
"""The range of an ``INTEGER`` column on PostgreSQL and MariaDB (SQLite's holds 64 bits; the
store refuses the same values on every dialect, so a job moves between stores unchanged)."""


def _int32_columns(table: sa.Table) -> tuple[str, ...]:
    """The columns of ``table`` that hold a 32-bit integer (``BIGINT`` columns hold the rest)."""
    return tuple(
        column.name
        for column in table.columns
        if isinstance(column.type, sa.Integer) and not isinstance(column.type, sa.BigInteger)
    )


def require_int32(value: int, field: str, job_id: UUID | None = None) -> None:
    """Refuse an integer its 32-bit column cannot hold, naming it: PostgreSQL's binary COPY
    would otherwise write its low 32 bits (2**40 stored as 0), never an error."""
    if not isinstance(value, int):
        raise StoreDataError(
            field, f"expected an integer, got {type(value).__name__}", job_id=job_id
        )
    if not INT32_MIN <= value <= INT32_MAX:
        raise StoreDataError(
            field,
            f"{value} is outside the range of its column ({INT32_MIN}..{INT32_MAX})",
            job_id=job_id,
        )


def require_utc(value: datetime | None, field: str) -> None:
    """Refuse a naive or non-UTC datetime argument, naming it."""
    if value is None or (type(value) is datetime and value.tzinfo is UTC):
        return
    if not isinstance(value, datetime):
        raise StoreDataError(field, f"expected a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() != timedelta(0):
        raise StoreDataError(field, f"must be a timezone-aware UTC datetime, got {value!r}")


def _passthrough(value: Any, _: Any) -> Any:
    return value


def _structure_enum(value: Any, cls: type[enum.Enum]) -> enum.Enum:
    try:
        return cls(value)
    except ValueError:
        known = ", ".join(str(m.value) for m in cls)
        raise ValueError(f"unknown value {value!r} (expected one of {known})") from None


def _structure_tags(value: Any, _: Any) -> tuple[str, ...]:
    if isinstance(value, str):  # a node's tags column: a JSON array
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError(f"not JSON: {value[:40]!r}") from None
    return tuple(value)


def _build(detailed: bool) -> cattrs.Converter:
    conv = cattrs.Converter(detailed_validation=detailed)
    # values come typed from the column types: no coercion, the entities' validators check
    for kind in (str, int, UUID, datetime):
        conv.register_structure_hook(kind, _passthrough)
    conv.register_structure_hook(bool, lambda value, _: bool(value))  # 0/1 on MariaDB
    for enum_cls in _ENUMS:
        conv.register_structure_hook(enum_cls, _structure_enum)
    conv.register_structure_hook_func(lambda t: t == tuple[str, ...], _structure_tags)
    conv.register_unstructure_hook(datetime, lambda value: value)  # checked on write
    conv.register_unstructure_hook(UUID, lambda value: value)
    conv.register_unstructure_hook(JobPriority, int)
    for enum_cls in _ENUMS:
        if enum_cls is not JobPriority:
            conv.register_unstructure_hook(enum_cls, lambda value: value.value)
    conv.register_unstructure_hook_func(
        lambda t: t == tuple[str, ...], lambda tags: json.dumps(sorted(tags))
    )
    # An entity's functions are generated when the converter first meets it (a worker uses the
    # job, node and execution ones; generating all eight pairs cost start-up time).
    conv.register_unstructure_hook_factory(
        _ENTITIES.__contains__, lambda cls: _unstructure_fn(cls, conv)
    )
    conv.register_structure_hook_factory(
        _ENTITIES.__contains__,
        lambda cls: make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=False),
    )
    return conv


def _unstructure_fn(cls: type, conv: cattrs.Converter) -> Callable[[Any], dict[str, Any]]:
    omitted = {name: override(omit=True) for name in _OMITTED_ON_WRITE.get(cls, ())}
    return make_dict_unstructure_fn(cls, conv, **omitted)  # type: ignore[arg-type]


_fast = _build(detailed=False)


@functools.cache
def _detailed() -> cattrs.Converter:
    """Built on the first row that fails (start-up pays for the fast converter only)."""
    return _build(detailed=True)


def _structure(row: Mapping[str, Any], cls: type[T], job_id: UUID | None = None) -> T:
    try:
        return _fast.structure(row, cls)
    except (ValueError, TypeError, KeyError):
        pass
    try:
        found = _detailed().structure(row, cls)
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
        field, cause = first_invalid_field(exc, unknown="row")
        reason = str(cause)
        what = "stored row is invalid" if field == "row" else "invalid stored value"
        raise StoreDataError(field, f"{what}: {reason}", job_id=job_id) from exc
    return found  # the fast converter failed where the detailed one did not: use its result


def _unstructure(entity: Any) -> dict[str, Any]:
    row: dict[str, Any] = _fast.unstructure(entity, unstructure_as=type(entity))
    return row


def _write_checks(cls: type, table: sa.Table) -> Callable[[Any], None]:
    """The checks an entity of ``cls`` needs before it is written to ``table``: aware UTC
    datetimes, known enum values and integers that fit their column, each refused with
    ``StoreDataError`` naming the field."""
    resolved = attrs.fields(attrs.resolve_types(cls))
    int32 = _int32_columns(table)
    ints = [f.name for f in resolved if f.name in int32]
    enums = [
        (f.name, f.type)
        for f in resolved
        if isinstance(f.type, type) and issubclass(f.type, enum.Enum)
    ]
    stamps = [f.name for f in resolved if "datetime" in str(f.type)]

    def check(entity: Any) -> None:
        job_id = entity.id if isinstance(entity, JobEntity) else None
        for name in stamps:
            require_utc(getattr(entity, name), name)
        for name, kind in enums:
            enum_value(kind, getattr(entity, name), name, job_id)
        for name in ints:
            require_int32(getattr(entity, name), name, job_id)

    return check


def _checked_write(
    cls: type, to_row: Callable[[Any], dict[str, Any]], table: sa.Table
) -> Callable[[Any], dict[str, Any]]:
    """``to_row`` after :func:`_write_checks`."""
    check = _write_checks(cls, table)

    def write(entity: Any) -> dict[str, Any]:
        check(entity)
        return to_row(entity)

    return write


# ---------------------------------------------------------------- the store's entry points


def job_to_row(job: JobEntity) -> dict[str, Any]:
    return _write_job(job)


def _job_values_writer() -> Callable[[JobEntity], tuple[Any, ...]]:
    """``job_values``: the job's columns read straight from the entity, with the same checks
    and values as ``job_to_row`` (aware UTC datetimes; enums by value, ``priority`` as its
    int) but no dict in between."""
    resolved = {f.name: f.type for f in attrs.fields(attrs.resolve_types(JobEntity))}
    getter = operator.attrgetter(*JOB_FIELDS)
    stamps = [(i, n) for i, n in enumerate(JOB_FIELDS) if "datetime" in str(resolved[n])]
    # member -> stored value, looked up once: ``member.value`` goes through enum's descriptor,
    # a tenth of a bulk insert's time at 10,000 rows
    enums = [
        (i, n, kind, {member: member.value for member in kind})
        for i, n in enumerate(JOB_FIELDS)
        if isinstance(kind := resolved[n], type) and issubclass(kind, enum.Enum)
    ]
    priority = JOB_FIELDS.index("priority")
    int32 = _int32_columns(s.jobs)
    ints = [(i, n) for i, n in enumerate(JOB_FIELDS) if n in int32]

    def values(job: JobEntity) -> tuple[Any, ...]:
        out = list(getter(job))
        for index, name in stamps:
            value = out[index]
            if value is not None and (type(value) is not datetime or value.tzinfo is not UTC):
                require_utc(value, name)
        for index, name, kind, stored in enums:
            member = out[index]
            out[index] = (
                stored[member]
                if type(member) is kind
                else enum_value(kind, member, name, job.id).value
            )
        out[priority] = int(out[priority])
        for index, name in ints:
            value = out[index]
            if type(value) is not int or not INT32_MIN <= value <= INT32_MAX:
                require_int32(value, name, job.id)
        return tuple(out)

    return values


job_values = _job_values_writer()
"""The job row as a tuple in ``JOB_FIELDS`` order (PostgreSQL's COPY of ``bulk_insert``)."""


def _members(cls: type[enum.Enum]) -> dict[Any, Any]:
    """A stored value (or the member itself) -> its member, for one dict lookup a row."""
    found: dict[Any, Any] = {member.value: member for member in cls}
    found.update({member: member for member in cls})
    return found


_STATUSES = _members(JobStatus)
_JOB_TYPES = _members(JobType)


def row_to_job(row: Row, tags: Sequence[str] = ()) -> JobEntity:
    """The claim path's conversion: every column but the two enums comes typed from its column
    type, so the entity is built directly (its own validators check the values); a row that
    fails that goes through the converter, which names the bad field (``StoreDataError``)."""
    values = {name: row[name] for name in JOB_FIELDS}
    values["tags"] = (*sorted(tags),)
    status = _STATUSES.get(values["status"])
    job_type = _JOB_TYPES.get(values["job_type"])
    if status is not None and job_type is not None:
        values["status"], values["job_type"] = status, job_type
        try:
            return JobEntity(**values)
        except (ValueError, TypeError):
            pass
    return _structure(values, JobEntity, row["id"])


def node_to_row(node: NodeEntity) -> dict[str, Any]:
    return _write_node(node)


def row_to_node(row: Row) -> NodeEntity:
    return _structure(dict(row), NodeEntity)


def recurring_to_row(rec: RecurringJobEntity) -> dict[str, Any]:
    return _write_recurring(rec)


def row_to_recurring(row: Row) -> RecurringJobEntity:
    return _structure(dict(row), RecurringJobEntity)


def batch_to_row(batch: BatchEntity) -> dict[str, Any]:
    return _write_batch(batch)


def row_to_batch(row: Row) -> BatchEntity:
    return _structure(dict(row), BatchEntity)


def condition_to_row(condition: WorkflowConditionEntity) -> dict[str, Any]:
    return _write_condition(condition)


def row_to_condition(row: Row) -> WorkflowConditionEntity:
    return _structure(dict(row), WorkflowConditionEntity)


def row_to_lock(row: Row) -> LockEntity:
    return _structure(dict(row), LockEntity)


def execution_to_row(record: ExecutionRecord) -> dict[str, Any]:
    return _write_execution(record)


def row_to_execution(row: Row) -> ExecutionRecord:
    return _structure(dict(row), ExecutionRecord, row["job_id"])


def log_to_row(line: JobLogLine) -> dict[str, Any]:
    return _write_log(line)


def row_to_log(row: Row) -> JobLogLine:
    return _structure(dict(row), JobLogLine, row["job_id"])


_write_job = _checked_write(JobEntity, _unstructure, s.jobs)
_write_node = _checked_write(NodeEntity, _unstructure, s.nodes)
_write_recurring = _checked_write(RecurringJobEntity, _unstructure, s.recurring_jobs)
_write_batch = _checked_write(BatchEntity, _unstructure, s.batches)
_write_condition = _checked_write(WorkflowConditionEntity, _unstructure, s.workflow_conditions)
check_execution = _write_checks(ExecutionRecord, s.executions)
"""The checks of ``execution_to_row`` without the row (PostgreSQL builds its audit document
from the entities)."""
_write_execution = _checked_write(ExecutionRecord, _unstructure, s.executions)
_write_log = _checked_write(JobLogLine, _unstructure, s.job_logs)
