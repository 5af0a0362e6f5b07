"""The one schema definition of the SQL store (SQLAlchemy Core ``MetaData``).

Every table is prefixed ``ratchet_``; constraint and index names follow the naming convention so
that migrations are reproducible on every backend. The Alembic baseline creates exactly this
schema (a test compares them on SQLite, PostgreSQL and MariaDB).

Importing this module loads no SQLAlchemy dialect package: the MySQL column variants resolve when
a MySQL dialect uses them (``_types``), and the partial indexes' ``WHERE`` for PostgreSQL and
SQLite (:class:`PartialIndex`) is filled in when a dialect first reads the index's options. A
worker on PostgreSQL so never imports SQLAlchemy's SQLite and MySQL dialects, and one on SQLite
never imports the PostgreSQL and MySQL ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cached_property
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.util import PopulateDict

if TYPE_CHECKING:
    from _collections_abc import dict_items, dict_keys, dict_values

from ratchet_api.store.entities import MAX_KEY_LENGTH, MAX_TAG_LENGTH
from ratchet_store_sql._types import UtcDateTime, key_string, long_text

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)

PARTIAL_INDEX_DIALECTS = ("postgresql", "sqlite")
"""The dialects on which a :class:`PartialIndex` indexes only the rows of its ``where``."""


class _PartialOptions(PopulateDict[str, Any]):
    """``dialect_options`` of a :class:`PartialIndex`: the ``where`` of a dialect in
    :data:`PARTIAL_INDEX_DIALECTS` is added when that dialect's options are created, on first
    read (which imports that dialect, as ``postgresql_where=`` would at declaration). Whatever
    lists the options (a copy of the table, Alembic's rendering) sees both dialects' ``where``."""

    def __init__(self, index: PartialIndex) -> None:
        super().__init__(self._create)
        self._index = index

    def _create(self, dialect_name: str) -> Any:
        options = self._index._kw_reg_for_dialect_cls(dialect_name)
        if dialect_name in PARTIAL_INDEX_DIALECTS:
            options["where"] = self._index.partial_where
        return options

    def _complete(self) -> None:
        for name in PARTIAL_INDEX_DIALECTS:
            if not dict.__contains__(self, name):
                self[name] = self._create(name)

    def __iter__(self) -> Iterator[str]:
        self._complete()
        return super().__iter__()

    def __len__(self) -> int:
        self._complete()
        return super().__len__()

    def __contains__(self, key: object) -> bool:
        self._complete()
        return super().__contains__(key)

    def keys(self) -> dict_keys[str, Any]:
        self._complete()
        return super().keys()

    def values(self) -> dict_values[str, Any]:
        self._complete()
        return super().values()

    def items(self) -> dict_items[str, Any]:
        self._complete()
        return super().items()


class PartialIndex(sa.Index):
    """An index of the rows matching ``where`` on PostgreSQL and SQLite (``postgresql_where``
    and ``sqlite_where``), of every row elsewhere, declared without importing those dialects
    (see the module docstring)."""

    def __init__(self, name: str, *expressions: Any, where: sa.ColumnElement[bool]) -> None:
        self.partial_where = where
        super().__init__(name, *expressions)

    @cached_property
    def dialect_options(self) -> _PartialOptions:
        return _PartialOptions(self)


MYSQL_DIALECTS = ("mysql", "mariadb")
"""SQLAlchemy's names of MySQL and MariaDB (MariaDB through ``mysql+...`` URLs is ``mysql``)."""
_ONLY_ON: dict[str, tuple[str, ...]] = {}
"""Indexes that exist on some dialects only, by name: their dialects."""


def only_on(index: sa.Index, *dialects: str) -> sa.Index:
    """Declare ``index`` as one of ``dialects`` only: ``create_all`` builds it there alone
    (``Index.ddl_if``) and :func:`declared_on` tells a schema comparison where it belongs."""
    assert index.name is not None
    index.ddl_if(dialect=dialects)  # type: ignore[arg-type]  # a tuple, as documented
    _ONLY_ON[str(index.name)] = dialects
    return index


def declared_on(name: str | None, type_: str, dialect_name: str) -> bool:
    """Whether the object ``name`` of kind ``type_`` (Alembic's kinds) belongs to the schema of
    ``dialect_name`` (False: an index declared :func:`only_on` other dialects). For Alembic's
    ``include_object``, which sees the declared objects (``include_name`` sees only the
    database's)."""
    dialects = _ONLY_ON.get(name or "") if type_ == "index" else None
    return dialects is None or dialect_name in dialects


KEY = MAX_KEY_LENGTH
STATUS_LEN = 20


def _job_columns() -> list[sa.Column[object]]:
    """Columns shared by the hot job table and the archive."""
    return [
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column("status", sa.String(STATUS_LEN), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("job_type", sa.String(STATUS_LEN), nullable=False),
        sa.Column("target", key_string(512), nullable=False),
        sa.Column("payload", long_text(), nullable=False),
        sa.Column("scheduled_at", UtcDateTime(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.Column("started_at", UtcDateTime(), nullable=True),
        sa.Column("finished_at", UtcDateTime(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("max_retries", sa.Integer(), nullable=False),
        sa.Column("backoff", sa.Text(), nullable=True),
        sa.Column("claim_seq", sa.Integer(), nullable=False),
        sa.Column("owner", key_string(KEY), nullable=True),
        sa.Column("heartbeat_at", UtcDateTime(), nullable=True),
        sa.Column("idempotency_key", key_string(KEY), nullable=True),
        sa.Column("execution_target", key_string(KEY), nullable=True),
        sa.Column("result", long_text(), nullable=True),
        sa.Column("last_error", long_text(), nullable=True),
        sa.Column("parent_id", sa.Uuid(), nullable=True),
        sa.Column("batch_id", sa.Uuid(), nullable=True),
        sa.Column("signal_key", key_string(KEY), nullable=True),
        sa.Column("signal_deadline", UtcDateTime(), nullable=True),
        sa.Column("signal_payload", long_text(), nullable=True),
        sa.Column("resource_key", key_string(KEY), nullable=True),
        sa.Column("recurring_name", key_string(KEY), nullable=True),
        # set when the worker starts the current claim (migration 0003)
        sa.Column("dispatched_at", UtcDateTime(), nullable=True),
        sa.Column("workflow", sa.Text(), nullable=True),
        sa.Column("flow_control", sa.Text(), nullable=True),
        # the group a claim interleaves (migration 0015); NULL: the unkeyed group
        sa.Column("fairness_key", key_string(KEY), nullable=True),
    ]


jobs = sa.Table(
    "ratchet_jobs",
    metadata,
    *_job_columns(),
    sa.UniqueConstraint("idempotency_key"),
)
# The claim path: PENDING jobs by priority (highest first), due time, id, in the claim's own
# order so that a claim reads only the rows it takes (InnoDB locks every row a locking read
# scans). Partial where the database supports it: only claimable rows are indexed.
PartialIndex(
    "ix_ratchet_jobs_claim",
    jobs.c.status,
    jobs.c.priority.desc(),
    jobs.c.scheduled_at,
    jobs.c.id,
    where=jobs.c.status == "PENDING",
)
# A worker's own jobs (recovery by node). ``owner`` is NULL from enqueue until a claim and again
# after a reset: partial where supported, so an enqueue writes no entry into it (migration 0018).
# Every query reading it compares ``owner`` with a value (``=``, ``IN``), which implies
# ``IS NOT NULL``.
PartialIndex(
    "ix_ratchet_jobs_owner_status",
    jobs.c.owner,
    jobs.c.status,
    where=jobs.c.owner.is_not(None),
)
# Optional columns (NULL for most jobs): partial where supported, so inserting or moving a job
# that does not use them writes no entry into these indexes (migration 0002).
for _name, _columns, _column in (
    ("ix_ratchet_jobs_status_signal_deadline", ("status", "signal_deadline"), "signal_deadline"),
    ("ix_ratchet_jobs_signal_key", ("signal_key",), "signal_key"),
    ("ix_ratchet_jobs_parent_id", ("parent_id",), "parent_id"),
    ("ix_ratchet_jobs_batch_id", ("batch_id",), "batch_id"),
):
    PartialIndex(_name, *(jobs.c[c] for c in _columns), where=jobs.c[_column].is_not(None))
# The fair claim (migrations 0016, 0017, 0019): PENDING jobs by fairness key, then in claim
# order, so the claim reads each key's first jobs (and the keys themselves, one probe each)
# without sorting a key's backlog. On PostgreSQL and SQLite the index is partial (PENDING only)
# and the key leads: a probe for the next key or for the unkeyed group (NULL, last) descends
# straight to it. MySQL/MariaDB have no partial indexes: there the status leads, so that a probe
# skips the finished jobs of a drained backlog (migration 0019).
only_on(
    PartialIndex(
        "ix_ratchet_jobs_fair_claim",
        jobs.c.fairness_key,
        jobs.c.priority.desc(),
        jobs.c.scheduled_at,
        jobs.c.id,
        where=jobs.c.status == "PENDING",
    ),
    *PARTIAL_INDEX_DIALECTS,
)
only_on(
    sa.Index(
        "ix_ratchet_jobs_status_fair_claim",
        jobs.c.status,
        jobs.c.fairness_key,
        jobs.c.priority.desc(),
        jobs.c.scheduled_at,
        jobs.c.id,
    ),
    *MYSQL_DIALECTS,
)
sa.Index("ix_ratchet_jobs_created_at", jobs.c.created_at)
sa.Index("ix_ratchet_jobs_target", jobs.c.target)
# Columns a run sets (NULL from enqueue until a worker runs the job): partial where supported,
# so an enqueue writes no entry into these indexes (migration 0012).
for _name, _column in (
    ("ix_ratchet_jobs_status_heartbeat_at", "heartbeat_at"),
    ("ix_ratchet_jobs_status_finished_at", "finished_at"),
    ("ix_ratchet_jobs_status_started_at", "started_at"),
):
    PartialIndex(_name, jobs.c.status, jobs.c[_column], where=jobs.c[_column].is_not(None))

job_tags = sa.Table(
    "ratchet_job_tags",
    metadata,
    sa.Column(
        "job_id",
        sa.Uuid(),
        sa.ForeignKey("ratchet_jobs.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("tag", key_string(MAX_TAG_LENGTH), primary_key=True),
)
sa.Index("ix_ratchet_job_tags_tag_job_id", job_tags.c.tag, job_tags.c.job_id)

nodes = sa.Table(
    "ratchet_nodes",
    metadata,
    sa.Column("node_id", key_string(KEY), primary_key=True),
    sa.Column("host", key_string(KEY), nullable=False),
    sa.Column("pid", sa.Integer(), nullable=False),
    sa.Column("started_at", UtcDateTime(), nullable=False),
    sa.Column("last_heartbeat", UtcDateTime(), nullable=False),
    sa.Column("running_jobs", sa.Integer(), nullable=False),
    sa.Column("tags", sa.Text(), nullable=False),
)
sa.Index("ix_ratchet_nodes_last_heartbeat", nodes.c.last_heartbeat)

recurring_jobs = sa.Table(
    "ratchet_recurring_jobs",
    metadata,
    sa.Column("name", key_string(KEY), primary_key=True),
    sa.Column("cron", key_string(KEY), nullable=False),
    sa.Column("timezone", sa.String(64), nullable=False),
    sa.Column("target", key_string(512), nullable=False),
    sa.Column("payload", long_text(), nullable=False),
    sa.Column("priority", sa.Integer(), nullable=False),
    sa.Column("max_retries", sa.Integer(), nullable=False),
    sa.Column("next_fire_at", UtcDateTime(), nullable=False),
    sa.Column("last_fired_at", UtcDateTime(), nullable=True),
    sa.Column("misfire_policy", sa.String(STATUS_LEN), nullable=False),
    sa.Column("enabled", sa.Boolean(), nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False),
)
sa.Index(
    "ix_ratchet_recurring_jobs_enabled_next_fire_at",
    recurring_jobs.c.enabled,
    recurring_jobs.c.next_fire_at,
)

batches = sa.Table(
    "ratchet_batches",
    metadata,
    sa.Column("id", sa.Uuid(), primary_key=True),
    sa.Column("name", key_string(KEY), nullable=False),
    sa.Column("status", sa.String(STATUS_LEN), nullable=False),
    sa.Column("total", sa.Integer(), nullable=False),
    sa.Column("succeeded", sa.Integer(), nullable=False),
    sa.Column("failed", sa.Integer(), nullable=False),
    sa.Column("parent_job_id", sa.Uuid(), nullable=True),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Column("completed_at", UtcDateTime(), nullable=True),
    sa.Column("last_error", long_text(), nullable=True),
)

workflow_conditions = sa.Table(
    "ratchet_workflow_conditions",
    metadata,
    sa.Column("id", sa.Uuid(), primary_key=True),
    sa.Column("parent_job_id", sa.Uuid(), nullable=False),
    sa.Column("child_job_id", sa.Uuid(), nullable=False),
    sa.Column("kind", sa.String(STATUS_LEN), nullable=False),
    sa.Column("expression", long_text(), nullable=True),
    sa.Column("position", sa.Integer(), nullable=False),
)
sa.Index(
    "ix_ratchet_workflow_conditions_parent_job_id_position",
    workflow_conditions.c.parent_job_id,
    workflow_conditions.c.position,
)

resource_permits = sa.Table(
    "ratchet_resource_permits",
    metadata,
    sa.Column("resource_key", key_string(KEY), primary_key=True),
    sa.Column("holder", key_string(KEY), primary_key=True),
    sa.Column("acquired_at", UtcDateTime(), nullable=False),
    sa.Column("expires_at", UtcDateTime(), nullable=False),
)

rate_limits = sa.Table(
    "ratchet_rate_limits",
    metadata,
    sa.Column("key", key_string(KEY), primary_key=True),
    sa.Column("tokens", sa.Float(), nullable=False),
    sa.Column("refreshed_at", UtcDateTime(), nullable=False),
)

locks = sa.Table(
    "ratchet_locks",
    metadata,
    sa.Column("name", key_string(KEY), primary_key=True),
    sa.Column("owner", key_string(KEY), nullable=False),
    sa.Column("acquired_at", UtcDateTime(), nullable=False),
    sa.Column("expires_at", UtcDateTime(), nullable=False),
)

archived_jobs = sa.Table(
    "ratchet_archived_jobs",
    metadata,
    *_job_columns(),
    sa.Column("tags", sa.Text(), nullable=False),
    sa.Column("properties", long_text(), nullable=False),
    sa.Column("state", long_text(), nullable=False),
    sa.Column("archived_at", UtcDateTime(), nullable=False),
)
sa.Index("ix_ratchet_archived_jobs_finished_at", archived_jobs.c.finished_at)

job_properties = sa.Table(
    "ratchet_job_properties",
    metadata,
    sa.Column(
        "job_id",
        sa.Uuid(),
        sa.ForeignKey("ratchet_jobs.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("key", key_string(KEY), primary_key=True),
    sa.Column("value", long_text(), nullable=False),
)
sa.Index("ix_ratchet_job_properties_key", job_properties.c.key)

job_state = sa.Table(
    "ratchet_job_state",
    metadata,
    sa.Column(
        "job_id",
        sa.Uuid(),
        sa.ForeignKey("ratchet_jobs.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("namespace", key_string(KEY), primary_key=True),
    sa.Column("json", long_text(), nullable=False),
    sa.Column("version", sa.Integer(), nullable=False),
)

executions = sa.Table(
    "ratchet_executions",
    metadata,
    sa.Column("id", sa.Uuid(), primary_key=True),
    sa.Column("job_id", sa.Uuid(), nullable=False),
    sa.Column("attempt", sa.Integer(), nullable=False),
    sa.Column("node_id", key_string(KEY), nullable=False),
    sa.Column("status", sa.String(STATUS_LEN), nullable=False),
    sa.Column("started_at", UtcDateTime(), nullable=False),
    sa.Column("finished_at", UtcDateTime(), nullable=True),
    sa.Column("duration_ms", sa.BigInteger(), nullable=True),
    sa.Column("error", long_text(), nullable=True),
    sa.Column("traceback", long_text(), nullable=True),
    sa.Column("superseded", sa.Boolean(), nullable=False, server_default=sa.false()),
)
sa.Index("ix_ratchet_executions_job_id_attempt", executions.c.job_id, executions.c.attempt)

job_logs = sa.Table(
    "ratchet_job_logs",
    metadata,
    sa.Column(
        "id",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        primary_key=True,
        autoincrement=True,
    ),
    sa.Column("job_id", sa.Uuid(), nullable=False),
    sa.Column("logged_at", UtcDateTime(), nullable=False),
    sa.Column("level", sa.String(STATUS_LEN), nullable=False),
    sa.Column("message", long_text(), nullable=False),
    sa.Column("attempt", sa.Integer(), nullable=False),
)
sa.Index("ix_ratchet_job_logs_job_id_id", job_logs.c.job_id, job_logs.c.id)

VERSION_TABLE = "ratchet_alembic_version"

# PostgreSQL keeps the history tables in range partitions (migration 0013): the partitions
# (``<table>_pYYYYMMDD``, hourly ``<table>_pYYYYMMDDHH``, ``<table>_default``) and the archive's unique (id, finished_at), the
# key a partitioned table can have in place of its primary key, are not part of this metadata.
HISTORY_PARTITION = re.compile(
    r"^(ratchet_archived_jobs|ratchet_executions)_(p\d{8}(\d{2})?|default)$"
)
POSTGRESQL_ONLY_CONSTRAINTS = frozenset({"uq_ratchet_archived_jobs_id_finished_at"})
# Covering partial indexes of the queue statistics, created on PostgreSQL only (migration 0014
# says why); not part of this metadata.
POSTGRESQL_ONLY_INDEXES = frozenset(
    {"ix_ratchet_jobs_pending_queues", "ix_ratchet_jobs_running_queues"}
)


def described_by_metadata(name: str | None, type_: str) -> bool:
    """Whether the database object ``name`` of kind ``type_`` (Alembic's ``include_name``
    kinds) is one this metadata describes: a Ratchet table, not a history partition."""
    if name is None:
        return type_ != "table"
    if type_ == "table":
        return name.startswith("ratchet_") and HISTORY_PARTITION.match(name) is None
    return name not in POSTGRESQL_ONLY_CONSTRAINTS and name not in POSTGRESQL_ONLY_INDEXES


__all__ = [
    "HISTORY_PARTITION",
    "MYSQL_DIALECTS",
    "NAMING_CONVENTION",
    "PARTIAL_INDEX_DIALECTS",
    "POSTGRESQL_ONLY_CONSTRAINTS",
    "POSTGRESQL_ONLY_INDEXES",
    "VERSION_TABLE",
    "PartialIndex",
    "archived_jobs",
    "batches",
    "declared_on",
    "described_by_metadata",
    "executions",
    "job_logs",
    "job_properties",
    "job_state",
    "job_tags",
    "jobs",
    "locks",
    "metadata",
    "nodes",
    "only_on",
    "rate_limits",
    "recurring_jobs",
    "resource_permits",
    "workflow_conditions",
]
