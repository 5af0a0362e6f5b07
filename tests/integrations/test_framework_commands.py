"""One set of commands: ``flask ratchet ...`` and ``manage.py ratchet_...`` take the options of
``ratchet ...`` (compared through the real executables' ``--help``), and run for real in
subprocesses against a real Flask app and a real Django project (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import backend_url

ROOT = Path(__file__).parents[2]
BIN = Path(sys.executable).parent
DJANGO_SETTINGS = "tests.integrations.django_project.settings"
FLASK_APP = "tests.integrations.flask_app:create_app"

pytestmark = pytest.mark.slow

# Options each framework command must accept, as the `ratchet` command spells them.
# `--url` is the one exception in Django: there the project's settings own the store.
_OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z-]*|-[a-zA-Z])(?![\w-])")


def _run(argv: list[str], env: dict[str, str] | None = None, timeout: float = 120) -> str:
    done = subprocess.run(
        argv,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{argv}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def ratchet(*args: str, env: dict[str, str] | None = None) -> str:
    return _run([str(BIN / "ratchet"), *args], env)


def manage(*args: str, env: dict[str, str] | None = None) -> str:
    """``manage.py ARGS`` of the test project (``python -m django`` is what manage.py runs)."""
    return _run(
        [sys.executable, "-m", "django", *args],
        {"DJANGO_SETTINGS_MODULE": DJANGO_SETTINGS, **(env or {})},
    )


def flask(*args: str, env: dict[str, str] | None = None) -> str:
    return _run([str(BIN / "flask"), "--app", FLASK_APP, *args], env)


def options(help_text: str) -> set[str]:
    """The option names of a ``--help`` page's options section (click: "Options:", argparse:
    "options:"), not those in its examples."""
    section = re.split(r"^options:\s*$", help_text, flags=re.IGNORECASE | re.MULTILINE)[-1]
    names: set[str] = set()
    for line in section.splitlines():
        if line.lstrip().startswith("-"):  # the flags column, up to the help text
            names.update(_OPTION.findall(re.split(r"\s{2,}", line.strip())[0]))
    return names - {"-h", "--help"}


PARITY = [
    (("worker",), ("ratchet_worker",)),
    (("jobs", "list"), ("ratchet_jobs", "list")),
    (("jobs", "show"), ("ratchet_jobs", "show")),
    (("jobs", "retry"), ("ratchet_jobs", "retry")),
    (("enqueue",), ("ratchet_enqueue",)),
    (("db", "current"), ("ratchet_db", "current")),
    (("db", "upgrade"), ("ratchet_db", "upgrade")),
]


@pytest.mark.parametrize(("command", "django_command"), PARITY, ids="-".join)
def test_framework_commands_accept_the_options_of_the_ratchet_command(
    command: tuple[str, ...], django_command: tuple[str, ...], tmp_path: Path
) -> None:
    env = {"RATCHET_TEST_FLASK_DB": f"sqlite:///{tmp_path / 'flask.db'}"}
    expected = options(ratchet(*command, "--help"))
    assert expected, "the ratchet command's help lists no option"

    in_flask = options(flask("ratchet", *command, "--help", env=env))
    in_django = options(manage(*django_command, "--help"))

    assert expected <= in_flask, f"flask ratchet {' '.join(command)} lacks {expected - in_flask}"
    assert expected - {"--url"} <= in_django, (
        f"manage.py {' '.join(django_command)} lacks {expected - {'--url'} - in_django}"
    )


def test_worker_help_lists_the_options_the_issue_names() -> None:
    listed = options(manage("ratchet_worker", "--help"))
    for name in ("-c", "--prefetch", "--targets", "--status", "--log-level", "--burst-timeout"):
        assert name in listed
    assert "--queue" in listed


@pytest.fixture(params=["sqlite", "postgresql"])
def store_env(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """``RATCHET_STORE_URL`` for a fresh store (above the project's DATABASES default)."""
    yield {"RATCHET_STORE_URL": backend_url(request, request.param)}


def test_django_commands_migrate_enqueue_run_and_list(store_env: dict[str, str]) -> None:
    before = subprocess.run(
        [sys.executable, "-m", "django", "ratchet_db", "current"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": DJANGO_SETTINGS}
        | store_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if store_env["RATCHET_STORE_URL"].startswith("sqlite"):  # a read never creates the file
        assert before.returncode == 1 and "no Ratchet database at" in before.stderr
    else:
        assert before.returncode == 0 and before.stdout.strip().splitlines()[-1] == "none"
    manage("ratchet_db", "upgrade", env=store_env)
    revision = manage("ratchet_db", "current", env=store_env).strip().splitlines()[-1]
    assert revision not in ("", "none")

    target = "tests.integrations.django_project.shop.jobs:greet"
    job_id = manage("ratchet_enqueue", target, "ada", "--tag", "cli", env=store_env).strip()
    log = manage(
        "ratchet_worker",
        "--burst",
        "--burst-timeout",
        "60",
        "-c",
        "2",
        "--prefetch",
        "1",
        "--no-status",
        "--log-level",
        "debug",
        env=store_env,
    )
    assert "succeeded 1," in log

    lines = (
        manage(
            "ratchet_jobs",
            "list",
            "--json",
            "--status",
            "succeeded",
            "--target",
            target,
            env=store_env,
        )
        .strip()
        .splitlines()
    )
    jobs = [json.loads(line) for line in lines]
    assert [job["id"] for job in jobs] == [job_id]
    assert jobs[0]["result"] == json.dumps("hello ada") or "hello ada" in str(jobs[0]["result"])
    shown = json.loads(manage("ratchet_jobs", "show", job_id, "--json", env=store_env))
    assert shown["status"] == "SUCCEEDED"
    assert shown["args"] == ["ada"]


def test_django_worker_names_the_django_migrate_command_without_a_schema(tmp_path: Path) -> None:
    env = {
        "DJANGO_SETTINGS_MODULE": DJANGO_SETTINGS,
        "PYTHONPATH": str(ROOT),
        "RATCHET_STORE_URL": f"sqlite:///{tmp_path / 'empty.db'}",
    }
    done = subprocess.run(
        [sys.executable, "-m", "django", "ratchet_worker", "--burst"],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert "manage.py ratchet_migrate" in done.stderr


def test_flask_worker_and_jobs_take_the_ratchet_options(tmp_path: Path) -> None:
    env = {"RATCHET_TEST_FLASK_DB": f"sqlite:///{tmp_path / 'flask.db'}"}
    flask("ratchet", "db", "upgrade", env=env)
    target = "tests.integrations.flask_app.jobs:shout"
    job_id = flask("ratchet", "enqueue", target, "kettle", env=env).strip()
    log = flask(
        "ratchet",
        "worker",
        "--burst",
        "--burst-timeout",
        "60",
        "-c",
        "2",
        "--prefetch",
        "0",
        "--no-status",
        "--log-level",
        "debug",
        env=env,
    )
    assert "succeeded 1," in log
    assert "concurrency sync=2" in log  # -c reached the app's container
    lines = (
        flask(
            "ratchet",
            "jobs",
            "list",
            "--json",
            "--status",
            "succeeded",
            "--target",
            target,
            env=env,
        )
        .strip()
        .splitlines()
    )
    assert [json.loads(line)["id"] for line in lines] == [job_id]
