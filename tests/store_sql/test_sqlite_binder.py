"""The SQLite store's row binder (``_Binder``: what its single and bulk inserts send to sqlite3)
gives the values SQLAlchemy's own bind processors give for every column of a job row, with
every optional column set and unset, so that rows it writes read back like any other."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

from sqlalchemy.dialects import sqlite

from ratchet_api.store.entities import JobEntity
from ratchet_store_sql._convert import JOB_FIELDS, job_values
from ratchet_store_sql._dialects.sqlite import _Binder
from ratchet_store_sql.schema import jobs


def _processed(values: tuple[object, ...]) -> tuple[object, ...]:
    dialect = sqlite.dialect()
    out = []
    for name, value in zip(JOB_FIELDS, values, strict=True):
        processor = jobs.c[name].type.bind_processor(dialect)
        out.append(processor(value) if processor is not None and value is not None else value)
    return tuple(out)


def test_binder_matches_the_column_bind_processors() -> None:
    binder = _Binder(sqlite.dialect())
    stamp = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    zero_offset = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(0)))
    for job in (
        JobEntity(),
        JobEntity(
            parent_id=uuid.uuid4(),
            batch_id=uuid.uuid4(),
            started_at=stamp,
            finished_at=zero_offset,
            heartbeat_at=stamp,
            signal_deadline=stamp,
            dispatched_at=stamp,
            idempotency_key="k",
            fairness_key="tenant",
        ),
    ):
        values = job_values(job)
        assert binder(values) == _processed(values)
