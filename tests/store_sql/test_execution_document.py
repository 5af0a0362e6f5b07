"""PostgreSQL's batched audit write reads execution records straight from the entities: the
document holds, column by column, what the converter (``execution_to_row``) writes, and a
record the converter refuses is refused with the same ``StoreDataError``, before anything is
sent."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from uuid import UUID, uuid4

import attrs
import pytest

from ratchet_api.errors import StoreDataError
from ratchet_api.model import JobStatus
from ratchet_api.store.entities import ExecutionRecord
from ratchet_store_sql._convert import execution_to_row
from ratchet_store_sql._dialects.postgresql import _EXECUTION_COLUMNS, _execution_document

_START = datetime(2026, 12, 5, 10, 0, 0, 250000, tzinfo=UTC)


def _records() -> list[ExecutionRecord]:
    plain = ExecutionRecord(
        job_id=uuid4(), attempt=1, node_id="node-a", status=JobStatus.SUCCEEDED, started_at=_START
    )
    return [
        plain,
        attrs.evolve(
            plain,
            id=uuid4(),
            attempt=3,
            status=JobStatus.FAILED,
            finished_at=_START + timedelta(milliseconds=1500),
            duration_ms=1500,
            error='ValueError: bad "quote" and ünïcode',
            traceback="Traceback (most recent call last):\n  ...",
            superseded=True,
        ),
    ]


def _converter_value(value: object) -> object:
    if isinstance(value, datetime):
        return value.replace(tzinfo=None).isoformat()
    if isinstance(value, UUID):
        return value.hex
    return value


def test_the_document_holds_what_the_converter_writes() -> None:
    records = _records()
    document = json.loads(_execution_document(records)["rows"])
    expected = [
        [_converter_value(execution_to_row(r)[column]) for column in _EXECUTION_COLUMNS]
        for r in records
    ]
    assert document == expected


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("started_at", datetime(2026, 12, 5, 10, 0)),  # naive
        ("finished_at", datetime(2026, 12, 5, 11, 0, tzinfo=timezone(timedelta(hours=1)))),
        ("attempt", 2**40),
        ("attempt", None),
    ],
)
def test_a_record_the_converter_refuses_is_refused_naming_the_field(
    field: str, value: object
) -> None:
    record = _records()[1]
    object.__setattr__(record, field, value)  # past the entity's own validators
    with pytest.raises(StoreDataError, match=field):
        _execution_document([_records()[0], record])
