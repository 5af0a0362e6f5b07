"""The ``ratchet`` commands say which store they use and where its URL came from, never
create a database on a read, and treat a store without a schema as nothing to migrate (the
real ``ratchet`` script in a subprocess, in an empty project directory)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

RATCHET = Path(sys.executable).with_name("ratchet")
REPO = Path(__file__).resolve().parents[2]

MEMORY_APP = """
from dependency_injector import providers

from ratchet_core.runtime.container import create_container as ratchet_container
from ratchet_tck.memory import InMemoryJobStore


def create_container():
    container = ratchet_container()
    container.job_store.override(providers.Singleton(InMemoryJobStore))
    return container
"""


def ratchet(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")}
    environ["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [str(RATCHET), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**environ, **(env or {})},
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "command", [("jobs", "list"), ("db", "current"), ("jobs", "show", "0" * 32)], ids=" ".join
)
def test_a_read_command_on_a_missing_sqlite_file_names_the_url_and_creates_nothing(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    done = ratchet(*command, cwd=tmp_path)

    assert done.returncode == 1
    assert "no Ratchet database at" in done.stderr
    assert "sqlite:///ratchet.db (store.url from default)" in done.stderr
    assert not (tmp_path / "ratchet.db").exists()


def test_the_message_names_the_environment_when_the_url_came_from_there(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    done = ratchet("jobs", "list", cwd=tmp_path, env={"RATCHET_STORE_URL": url})

    assert done.returncode == 1
    assert f"{url} (store.url from environment" in done.stderr
    assert not (tmp_path / "elsewhere.db").exists()


def test_db_upgrade_says_which_store_it_migrates_and_reads_work_afterwards(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    upgraded = ratchet("--set", f"store.url={url}", "db", "upgrade", cwd=tmp_path)

    assert upgraded.returncode == 0, upgraded.stderr
    assert f"store: {url} (store.url from explicit overrides)" in upgraded.stdout
    listed = ratchet("jobs", "list", "--url", url, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "no jobs match" in listed.stdout


def test_a_store_without_a_schema_manager_has_nothing_to_migrate(tmp_path: Path) -> None:
    (tmp_path / "memapp.py").write_text(MEMORY_APP)

    for command in (("db", "upgrade"), ("db", "current"), ("db", "downgrade", "base")):
        done = ratchet("--app", "memapp:create_container", *command, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "InMemoryJobStore manages no schema: nothing to migrate" in done.stdout
