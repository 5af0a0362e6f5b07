"""The Alembic migrations shipped in the package build exactly the declared schema."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from ratchet_api.errors import StoreError
from ratchet_api.store import JobEntity, SchemaManager
from ratchet_store_sql import SqlJobStore, migrate
from ratchet_store_sql.migration import alembic_config, shipped_head_revision
from ratchet_store_sql.schema import VERSION_TABLE, declared_on, described_by_metadata, metadata


def _alembic_head() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def test_head_revision_read_without_alembic_is_alembics_head() -> None:
    # the worker's start-up check reads the scripts itself so that it never imports Alembic
    assert shipped_head_revision() == _alembic_head()


def test_worker_start_up_modules_do_not_import_alembic() -> None:
    code = (
        "import sys, ratchet_core.cli, ratchet_core.worker, ratchet_store_sql\n"
        "from ratchet_store_sql.migration import shipped_head_revision\n"
        "shipped_head_revision()\n"
        "print(sorted(m for m in ('alembic', 'mako') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def _only_ratchet(name: str | None, type_: str, _parents: object) -> bool:
    return described_by_metadata(name, type_)  # not PostgreSQL's history partitions


def test_migrated_schema_equals_declared_metadata(store: SqlJobStore) -> None:
    dialect = store.engine.dialect.name

    def declared_here(
        _obj: object, name: str | None, type_: str, reflected: bool, _to: object
    ) -> bool:
        return reflected or declared_on(name, type_, dialect)  # schema.only_on's indexes

    with store.engine.connect() as conn:
        context = MigrationContext.configure(
            conn,
            opts={
                "compare_type": True,
                "include_name": _only_ratchet,
                "include_object": declared_here,
            },
        )
        diff = [d for d in compare_metadata(context, metadata) if VERSION_TABLE not in str(d)]
    assert diff == []
    assert store.schema.current_revision() == store.schema.head_revision()


def test_migrations_are_package_data_not_repository_files() -> None:
    versions = resources.files("ratchet_store_sql") / "migrations" / "versions"
    names = [p.name for p in versions.iterdir() if p.name.endswith(".py")]
    assert any(n.startswith("0001_") for n in names)
    assert (resources.files("ratchet_store_sql") / "migrations" / "env.py").is_file()


def test_upgrade_downgrade_and_current_revision_on_a_fresh_database(tmp_sqlite_url: str) -> None:
    store = SqlJobStore(tmp_sqlite_url)
    manager = store.capability(SchemaManager)
    assert manager is not None
    assert manager.current_revision() is None
    manager.upgrade()
    manager.upgrade()  # idempotent
    assert manager.current_revision() == manager.head_revision() == _alembic_head()
    tables = set(sa.inspect(store.engine).get_table_names())
    assert {"ratchet_jobs", "ratchet_job_tags", VERSION_TABLE} <= tables
    manager.downgrade("base")
    assert manager.current_revision() is None
    assert set(sa.inspect(store.engine).get_table_names()) == {VERSION_TABLE}
    store.close()


def test_migrate_function_and_version_table_name(tmp_sqlite_url: str) -> None:
    migrate(tmp_sqlite_url)
    engine = sa.create_engine(tmp_sqlite_url)
    with engine.connect() as conn:
        version = conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
    engine.dispose()
    assert version == _alembic_head()


def test_relative_sqlite_url_with_create_schema_works_with_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = SqlJobStore("sqlite:///ratchet.db", create_schema=True)
    job = store.insert_job(JobEntity())
    assert store.find_by_id(job.id) is not None
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert int(conn.exec_driver_sql("PRAGMA busy_timeout").scalar() or 0) > 0
    store.close()
    assert (tmp_path / "ratchet.db").exists()


def test_missing_schema_is_a_store_error_telling_to_migrate(tmp_sqlite_url: str) -> None:
    store = SqlJobStore(tmp_sqlite_url)
    with pytest.raises(StoreError, match="ratchet db upgrade"):
        store.claim_next_batch("node", 10)
    store.close()


def _missing_database_url(request: pytest.FixtureRequest, backend: str) -> str:
    if backend == "sqlite":
        return "sqlite:////nonexistent/dir/x.db"
    server_url = str(request.getfixturevalue(f"{backend}_url"))
    return server_url.rsplit("/", 1)[0] + "/ratchet_no_such_database"


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mariadb"])
@pytest.mark.parametrize(
    "command", [("db", "upgrade"), ("db", "current"), ("db", "downgrade", "base")]
)
def test_db_commands_on_a_database_that_cannot_be_opened_print_one_error_line(
    request: pytest.FixtureRequest, backend: str, command: tuple[str, ...]
) -> None:
    url = _missing_database_url(request, backend)
    env = {k: v for k, v in os.environ.items() if k != "RATCHET_STORE_URL"}
    result = subprocess.run(
        [str(Path(sys.executable).with_name("ratchet")), *command, "--url", url],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    assert url.rsplit("/", 1)[1] in lines[0]


def test_schema_manager_raises_store_errors_for_a_file_that_cannot_be_opened() -> None:
    store = SqlJobStore("sqlite:////nonexistent/dir/x.db")
    manager = store.capability(SchemaManager)
    assert manager is not None
    with pytest.raises(StoreError, match="unable to open database file"):
        manager.current_revision()
    with pytest.raises(StoreError, match="unable to open database file"):
        manager.upgrade()
    store.close()
