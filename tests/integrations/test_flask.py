"""Flask: the extension with Flask-SQLAlchemy, views that enqueue (joined to db.session),
`flask ratchet ...` commands (CliRunner and the real `flask` executable), wiring and an
application SPI override."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest
from flask import Flask

from ratchet_api.model import JobStatus
from ratchet_core.contrib.flask import get_scheduler, get_state
from tests.conftest import backend_url

FLASK = Path(sys.executable).with_name("flask")


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest) -> str:
    return backend_url(request, request.param)


@pytest.fixture
def app(db_url: str) -> Iterator[Flask]:
    from tests.integrations.flask_app import create_app, db

    app = create_app({"SQLALCHEMY_DATABASE_URI": db_url})
    result = app.test_cli_runner().invoke(args=["ratchet", "db", "upgrade"])
    assert result.exit_code == 0, result.output
    yield app
    with app.app_context():
        db.session.remove()
        db.drop_all()
        db.engine.dispose()
    get_state(app).container.job_store().close()


def _burst(app: Flask) -> str:
    result = app.test_cli_runner().invoke(
        args=["ratchet", "worker", "--burst", "--burst-timeout", "20"]
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_store_defaults_to_the_flask_sqlalchemy_database(app: Flask, db_url: str) -> None:
    from ratchet_core.runtime.config import STORE_URL

    assert get_state(app).container.settings().get(STORE_URL) == db_url


def test_view_enqueue_commits_with_the_session_and_the_cli_worker_runs_it(app: Flask) -> None:
    from tests.integrations.flask_app import Order, db

    response = app.test_client().post("/orders", data={"item": "kettle"})
    assert response.status_code == 201
    job_id = UUID(response.get_json()["job_id"])

    assert "failed 0," in _burst(app)

    shown = app.test_client().get(f"/jobs/{job_id}").get_json()
    assert shown == {"status": "SUCCEEDED", "value": "KETTLE!"}
    with app.app_context():
        assert db.session.get(Order, response.get_json()["order_id"]) is not None


def test_session_rollback_removes_the_enqueued_job(app: Flask) -> None:
    from tests.integrations.flask_app import Order, db

    response = app.test_client().post("/orders", data={"item": "toaster", "fail": "1"})

    assert response.status_code == 409
    job_id = UUID(response.get_json()["job_id"])
    with app.app_context():
        assert get_scheduler().get(job_id) is None
        assert db.session.query(Order).count() == 0


def test_view_with_wired_scheduler_enqueues(app: Flask) -> None:
    response = app.test_client().post("/injected")

    assert response.status_code == 201
    job = get_scheduler(app).get(UUID(response.get_json()["job_id"]))
    assert job is not None and job.status is JobStatus.PENDING


def test_application_override_is_listed_by_flask_ratchet_spi(app: Flask) -> None:
    result = app.test_cli_runner().invoke(args=["ratchet", "spi", "--json"])

    assert result.exit_code == 0, result.output
    rows = {row["spi"]: row for row in json.loads(result.output)}
    assert rows["ErrorSanitizer"]["implementation"].endswith("ShopErrorSanitizer")
    assert rows["ErrorSanitizer"]["priority"] == 2000


def test_ratchet_config_keys_come_from_app_config(db_url: str) -> None:
    from tests.integrations.flask_app import create_app

    app = create_app({"SQLALCHEMY_DATABASE_URI": db_url, "RATCHET_WORKER_POLL_INTERVAL": "75ms"})
    from ratchet_core.worker.settings import WORKER_POLL_INTERVAL

    assert get_state(app).container.settings().get(WORKER_POLL_INTERVAL).total_seconds() == 0.075


@pytest.mark.slow
def test_flask_executable_runs_the_worker(app: Flask, db_url: str) -> None:
    response = app.test_client().post("/orders", data={"item": "radio"})
    job_id = UUID(response.get_json()["job_id"])
    env = {
        **os.environ,
        "RATCHET_TEST_FLASK_DB": db_url,
        "PYTHONPATH": str(Path(__file__).parents[2]),
    }
    done = subprocess.run(
        [
            str(FLASK),
            "--app",
            "tests.integrations.flask_app:create_app",
            "ratchet",
            "worker",
            "--burst",
            "--burst-timeout",
            "30",
        ],
        env=env,
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "failed 0," in done.stderr  # the session's PostgreSQL database may hold older jobs
    assert get_scheduler(app).result(job_id).value == "RADIO!"
