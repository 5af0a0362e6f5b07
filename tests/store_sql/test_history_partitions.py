"""PostgreSQL keeps archived jobs and execution records in daily partitions (migration 0013):
the migration keeps every row both ways, retention drops whole partitions older than its
horizon and keeps everything newer, and the archive is still found by id and by age."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from ratchet_api.errors import StoreError
from ratchet_api.model import JobStatus
from ratchet_api.store import JobEntity
from ratchet_api.store.entities import ExecutionRecord, JobLogLine, LogLevel
from ratchet_core.features.retention import Retention, RetentionPolicy, align_down
from ratchet_store_sql import SqlJobStore, migrate
from ratchet_store_sql import schema as s
from ratchet_store_sql._capabilities.history import HISTORY_DAYS_AHEAD, partition_name
from ratchet_store_sql._convert import execution_to_row, job_to_row
from tests import servers

DAY = timedelta(days=1)
HISTORY = (s.archived_jobs.name, s.executions.name)


@pytest.fixture
def pg_url() -> Iterator[str]:
    url = servers.create_postgres_database()
    try:
        yield url
    finally:
        servers.drop_postgres_database(url)


@pytest.fixture
def store(pg_url: str) -> Iterator[SqlJobStore]:
    migrate(pg_url)
    store = SqlJobStore(pg_url)
    try:
        yield store
    finally:
        store.close()


def sql(store: SqlJobStore, text: str, **params: Any) -> list[Any]:
    with store.engine.begin() as conn:
        result = conn.execute(sa.text(text), params)
        return list(result) if result.returns_rows else []


def partitions(store: SqlJobStore, table: str) -> set[str]:
    """The partitions of ``table`` as the catalog lists them (pg_inherits / pg_class)."""
    rows = sql(
        store,
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = CAST(:t AS regclass)",
        t=table,
    )
    return {r[0] for r in rows}


def relkind(store: SqlJobStore, table: str) -> str:
    (row,) = sql(store, "SELECT relkind FROM pg_class WHERE oid = CAST(:t AS regclass)", t=table)
    return str(row[0])


def holder(store: SqlJobStore, table: str, key: str, value: uuid.UUID) -> str:
    """The partition holding the row of ``table`` whose ``key`` is ``value``."""
    (row,) = sql(store, f"SELECT tableoid::regclass::text FROM {table} WHERE {key} = :v", v=value)
    return str(row[0])


def finished_job(at: datetime, status: JobStatus = JobStatus.SUCCEEDED) -> JobEntity:
    return JobEntity(
        target="tests.engine.targets:noop",
        status=status,
        scheduled_at=at,
        created_at=at,
        started_at=at,
        finished_at=at,
        attempt=1,
        result="null",
    )


def execution(job_id: uuid.UUID, at: datetime) -> ExecutionRecord:
    return ExecutionRecord(
        job_id=job_id,
        attempt=1,
        node_id="n1",
        status=JobStatus.SUCCEEDED,
        started_at=at,
        finished_at=at + timedelta(seconds=1),
        duration_ms=1000,
    )


def insert_as_of_now(url: str, table: str, rows: list[dict[str, Any]]) -> None:
    """Insert ``rows`` into ``table`` as it is in the database now (an older revision: only
    its columns, the store's own statements name the newest ones), datetimes as naive UTC."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            reflected = sa.Table(table, sa.MetaData(), autoload_with=conn)
            values = [
                {
                    k: v.astimezone(UTC).replace(tzinfo=None) if isinstance(v, datetime) else v
                    for k, v in row.items()
                    if k in reflected.c
                }
                for row in rows
            ]
            conn.execute(sa.insert(reflected), values)
    finally:
        engine.dispose()


def history_rows(url: str, columns: dict[str, list[str]]) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the history tables in a stable order, in ``columns`` (those of the first
    revision read: later revisions may add columns)."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return {
                table: sorted(
                    tuple(str(v) for v in row)
                    for row in conn.exec_driver_sql(f"SELECT {', '.join(names)} FROM {table}")
                )
                for table, names in columns.items()
            }
    finally:
        engine.dispose()


def test_migration_of_a_populated_database_keeps_every_row_both_ways(pg_url: str) -> None:
    migrate(pg_url, "0012")
    store = SqlJobStore(pg_url)
    try:
        assert store.history_partition_interval is None  # not partitioned yet
        now = store.server_now()
        ages = (400 * DAY, 50 * DAY, 3 * DAY, timedelta(0), -30 * DAY)
        jobs = [finished_job(now - age) for age in ages for _ in range(3)]
        extra = {"tags": "[]", "properties": "{}", "state": "{}", "archived_at": now}
        insert_as_of_now(pg_url, s.archived_jobs.name, [job_to_row(j) | extra for j in jobs])
        records = [execution(job.id, job.finished_at or now) for job in jobs]
        insert_as_of_now(pg_url, s.executions.name, [execution_to_row(r) for r in records])
        with store.engine.connect() as conn:
            columns = {t: [c["name"] for c in sa.inspect(conn).get_columns(t)] for t in HISTORY}
        before = history_rows(pg_url, columns)
        assert [len(before[t]) for t in HISTORY] == [15, 15]
    finally:
        store.close()

    migrate(pg_url)  # 0013 (and the newer ones): partitioned
    store = SqlJobStore(pg_url)
    try:
        assert history_rows(pg_url, columns) == before
        assert store.history_partition_interval == DAY
        for table in HISTORY:
            assert relkind(store, table) == "p"
            # a day for the oldest row (at most 92 days back) to 7 days ahead, and the default
            assert len(partitions(store, table)) == 92 + HISTORY_DAYS_AHEAD + 1 + 1
        today = align_down(now, DAY)
        assert holder(store, s.archived_jobs.name, "id", jobs[3].id) == partition_name(
            s.archived_jobs.name, (today - 50 * DAY).replace(tzinfo=None)
        )
        for job in (jobs[0], jobs[-1]):  # 400 days ago, 30 days ahead: no daily partition
            assert holder(store, s.archived_jobs.name, "id", job.id).endswith("_default")
        for job in jobs:
            found = store.find_archived_job(job.id)
            assert found is not None and found.finished_at == job.finished_at
            assert [e.job_id for e in store.find_executions_by_job_id(job.id)] == [job.id]
    finally:
        store.close()

    store = SqlJobStore(pg_url)
    try:
        store.schema.downgrade("0012")
        assert history_rows(pg_url, columns) == before
        for table in HISTORY:
            assert relkind(store, table) == "r"
            assert partitions(store, table) == set()
        store.schema.upgrade()
        assert history_rows(pg_url, columns) == before
    finally:
        store.close()


def test_migration_of_an_empty_database_makes_the_partitions_of_the_coming_days(
    store: SqlJobStore,
) -> None:
    today = align_down(store.server_now(), DAY).replace(tzinfo=None)
    for table in HISTORY:
        expected = {partition_name(table, today + n * DAY) for n in range(HISTORY_DAYS_AHEAD + 1)}
        assert partitions(store, table) == expected | {f"{table}_default"}
    store.schema.downgrade("0012")
    assert all(relkind(store, table) == "r" for table in HISTORY)
    store.schema.upgrade()
    assert all(relkind(store, table) == "p" for table in HISTORY)


def test_retention_drops_whole_partitions_and_keeps_the_newer_rows(store: SqlJobStore) -> None:
    now = store.server_now()
    assert store.ensure_history_partitions(now - 20 * DAY, now) == 2 * 20
    old = [finished_job(now - age) for age in (15 * DAY, 12 * DAY, 12 * DAY)]
    boundary = finished_job(now - 10 * DAY + timedelta(minutes=1))
    new = [finished_job(now - age) for age in (3 * DAY, timedelta(0))]
    pending = JobEntity(  # still live, created before its first attempt 15 days ago
        target="tests.engine.targets:noop", scheduled_at=now, created_at=now - 16 * DAY
    )
    store.bulk_insert([*old, boundary, *new, pending])
    for job in (*old, boundary, *new):
        assert store.archive_job(job.id)
    store.save_executions([execution(j.id, j.finished_at or now) for j in (*old, boundary, *new)])
    # an attempt of the live job 15 days ago: its record outlives its partition
    live_record = execution(pending.id, now - 15 * DAY)
    store.save_execution(live_record)
    store.append_logs(
        [JobLogLine(job_id=old[0].id, logged_at=now, level=LogLevel.INFO, message="x")]
    )
    archive = s.archived_jobs.name
    gone_days = {(now - age).replace(tzinfo=None) for age in (15 * DAY, 12 * DAY)}
    gone = {
        partition_name(t, align_down(d.replace(tzinfo=UTC), DAY).replace(tzinfo=None))
        for t in HISTORY
        for d in gone_days
    }
    assert gone <= partitions(store, archive) | partitions(store, s.executions.name)

    report = Retention(
        store, RetentionPolicy(succeeded=None, failed=None, cancelled=None, archive=10 * DAY)
    ).sweep()

    cutoff = align_down(now - 10 * DAY, DAY).replace(tzinfo=None)
    assert report.complete
    assert report.archive_deleted == len(old)
    for table in HISTORY:
        days = {n for n in partitions(store, table) if not n.endswith("_default")}
        assert not gone & days
        # every daily partition left ends after the cutoff
        assert min(days) == partition_name(table, cutoff)
    for job in old:
        assert store.find_archived_job(job.id) is None
        assert store.find_executions_by_job_id(job.id) == []
    assert store.find_logs_by_job_id(old[0].id) == []
    # the boundary day's partition stays whole (within one day of the horizon), newer ones too
    for job in (boundary, *new):
        assert store.find_archived_job(job.id) is not None
        assert len(store.find_executions_by_job_id(job.id)) == 1
    # the live job's record moved to the default partition instead of going with its day
    assert [e.id for e in store.find_executions_by_job_id(pending.id)] == [live_record.id]
    assert holder(store, s.executions.name, "id", live_record.id).endswith("_default")
    assert [j.id for j in store.find_archived_jobs(10)] == [
        j.id for j in (*reversed(new), boundary)
    ]


def test_rows_outside_the_daily_partitions_wait_in_the_default_one_and_move_when_theirs_comes(
    store: SqlJobStore,
) -> None:
    later = store.server_now() + 40 * DAY
    job = finished_job(later)
    store.bulk_insert([job])
    assert store.archive_job(job.id)
    record = execution(job.id, later)
    store.save_execution(record)
    store.save_execution(record)  # the upsert finds it again in its partition (id, started_at)
    assert holder(store, s.archived_jobs.name, "id", job.id).endswith("_default")
    assert store.ensure_history_partitions(later, later) == 2
    day = align_down(later, DAY).replace(tzinfo=None)
    assert holder(store, s.archived_jobs.name, "id", job.id) == partition_name(
        s.archived_jobs.name, day
    )
    assert holder(store, s.executions.name, "id", record.id) == partition_name(
        s.executions.name, day
    )
    assert [e.id for e in store.find_executions_by_job_id(job.id)] == [record.id]
    assert store.ensure_history_partitions(later, later) == 0


def test_archived_jobs_are_found_by_id_through_an_index_of_every_partition(
    store: SqlJobStore,
) -> None:
    rows = sql(
        store,
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = CAST(:t AS regclass) AND NOT EXISTS ("
        "  SELECT 1 FROM pg_index x JOIN pg_attribute a ON a.attrelid = x.indrelid"
        "  AND a.attnum = x.indkey[0] WHERE x.indrelid = c.oid AND a.attname = 'id')",
        t=s.archived_jobs.name,
    )
    assert rows == []  # every partition has an index led by id
    now = store.server_now()
    jobs = [finished_job(now - n * DAY) for n in range(3)]
    store.bulk_insert(jobs)
    for job in jobs:
        assert store.archive_job(job.id)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                sa.text(f"EXPLAIN SELECT * FROM {s.archived_jobs.name} WHERE id = :id"),
                {"id": jobs[0].id},
            )
        )
    assert "Seq Scan" not in plan
    assert "Index" in plan
    for job in jobs:
        found = store.find_archived_job(job.id)
        assert found is not None and found.id == job.id
    assert [j.id for j in store.find_archived_jobs(3)] == [j.id for j in jobs]


def test_other_databases_keep_unpartitioned_history(tmp_path: Any) -> None:
    store = SqlJobStore(f"sqlite:///{tmp_path / 'r.db'}", create_schema=True)
    try:
        assert store.history_partition_interval is None
        now = store.server_now()
        assert store.maintain_history(now - DAY) == 0
        assert store.ensure_history_partitions(now, now) == 0
        assert store.history_partitions(s.archived_jobs.name) == []
    finally:
        store.close()


HOUR = timedelta(hours=1)
WEEK = timedelta(days=7)


def ranges(store: SqlJobStore, table: str) -> list[tuple[datetime, datetime]]:
    return store.history_partition_ranges(table)


def covered_without_overlap(spans: list[tuple[datetime, datetime]]) -> bool:
    return all(a_hi <= b_lo for (_, a_hi), (b_lo, _) in itertools.pairwise(spans))


def test_hourly_partitions_are_made_an_hour_wide_and_dropped_whole(pg_url: str) -> None:
    migrate(pg_url)
    store = SqlJobStore(pg_url, history_partition="hour")
    try:
        assert store.history_partition_interval == HOUR
        now = store.server_now()
        # the migration made daily partitions from today on: hourly ones go before them
        midnight = align_down(now, DAY)
        made = store.ensure_history_partitions(midnight - 5 * HOUR, midnight - HOUR)
        assert made == 2 * 5
        archive = s.archived_jobs.name
        spans = ranges(store, archive)
        assert covered_without_overlap(spans)
        hourly = [(lo, hi) for lo, hi in spans if hi - lo == HOUR]
        assert len(hourly) == 5
        assert partition_name(archive, hourly[0][0]) in partitions(store, archive)
        old = finished_job(midnight - 4 * HOUR - timedelta(minutes=1))
        kept = finished_job(midnight - 2 * HOUR + timedelta(minutes=1))
        store.bulk_insert([old, kept])
        assert store.archive_job(old.id) and store.archive_job(kept.id)

        horizon = (now - midnight) + 3 * HOUR  # the sweep's cutoff rounds down to midnight - 3 h
        report = Retention(
            store, RetentionPolicy(succeeded=None, failed=None, cancelled=None, archive=horizon)
        ).sweep()

        assert report.archive_deleted == 1
        assert store.find_archived_job(old.id) is None
        assert store.find_archived_job(kept.id) is not None
        cutoff = (midnight - 3 * HOUR).replace(tzinfo=None)
        assert all(hi > cutoff for _, hi in ranges(store, archive))
        assert len([1 for lo, hi in ranges(store, archive) if hi - lo == HOUR]) == 3
    finally:
        store.close()


def test_a_wider_setting_starts_its_partitions_where_the_daily_ones_end(pg_url: str) -> None:
    migrate(pg_url)  # daily partitions from today to a week ahead
    weekly = SqlJobStore(f"{pg_url}?ratchet_history_partition=week")
    try:
        assert weekly.history_partition_interval == WEEK
        archive = s.archived_jobs.name
        daily_end = max(hi for _, hi in ranges(weekly, archive))
        weekly.maintain_history(None)
        spans = ranges(weekly, archive)
        assert covered_without_overlap(spans)
        later = [(lo, hi) for lo, hi in spans if lo >= daily_end]
        assert later and later[0][0] == daily_end  # no gap, no overlap
        assert all(hi - lo <= WEEK for lo, hi in later)
        assert any(hi - lo == WEEK for lo, hi in later)
        # a job finishing in a weekly partition lands there, not in the default one
        at = (later[-1][0] + timedelta(hours=5)).replace(tzinfo=UTC)
        job = finished_job(at)
        weekly.bulk_insert([job])
        assert weekly.archive_job(job.id)
        assert not holder(weekly, archive, "id", job.id).endswith("_default")
    finally:
        weekly.close()


@pytest.mark.parametrize("option", ["month", "1d"])
def test_a_width_that_is_not_hour_day_or_week_is_refused_at_construction(
    pg_url: str, option: str
) -> None:
    with pytest.raises(StoreError, match="hour, day, week"):
        SqlJobStore(f"{pg_url}?ratchet_history_partition={option}")
    with pytest.raises(StoreError, match="history partition width"):
        SqlJobStore(pg_url, history_partition=option)


def test_the_width_option_is_for_postgresql_only(tmp_path: Any) -> None:
    with pytest.raises(StoreError, match="is for PostgreSQL"):
        SqlJobStore(f"sqlite:///{tmp_path / 'w.db'}?ratchet_history_partition=week")
