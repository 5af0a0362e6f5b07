"""Django: transactional enqueue from a view, the worker command, the Tasks backend, system
checks and the SPI listing, on SQLite and PostgreSQL (pytest-django, a real project)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO
from typing import Any
from uuid import UUID

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import Client
from django.test.utils import override_settings

from ratchet_api.model import JobStatus
from ratchet_core.contrib.django import app_config, get_container, get_scheduler
from tests.integrations.django_support import backend, burst, ratchet_settings

__all__ = ["backend"]  # the fixture, imported for its tests

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


@pytest.fixture(autouse=True, scope="module")
def _close_stores() -> Iterator[None]:
    yield
    # pytest-django drops the test databases at the end: release the store's connections.
    get_container().job_store().close()


def test_rollback_of_the_view_transaction_leaves_no_job(backend: str) -> None:
    from tests.integrations.django_project.shop.models import Order

    response = Client().post("/orders/", {"item": "book", "fail": "1"})

    assert response.status_code == 409
    job_id = UUID(response.json()["job_id"])
    assert get_scheduler().get(job_id) is None
    assert not Order.objects.using(backend).exists()


def test_committed_enqueue_is_run_by_the_worker_command(backend: str) -> None:
    from tests.integrations.django_project.shop.models import Order

    response = Client().post("/orders/", {"item": "lamp"})

    assert response.status_code == 201
    job_id = UUID(response.json()["job_id"])
    job = get_scheduler().get(job_id)
    assert job is not None and job.status is JobStatus.PENDING
    assert "succeeded 1," in burst()
    result = get_scheduler().result(job_id)
    assert result.status is JobStatus.SUCCEEDED
    assert result.value == "processed 1"
    assert Order.objects.using(backend).get(pk=response.json()["order_id"]).processed


def test_store_defaults_to_the_followed_django_database(backend: str) -> None:
    from django.db import connections

    from ratchet_core.contrib.django.conf import database_url
    from ratchet_core.runtime.config import STORE_URL

    url = get_container().settings().get(STORE_URL)

    assert url == database_url(connections[backend].settings_dict, backend)
    assert app_config().joins_django_transactions()


def test_task_enqueue_runs_on_the_worker_and_result_is_read_through_django(backend: str) -> None:
    from django_tasks import TaskResultStatus

    from tests.integrations.django_project.shop.jobs import multiply

    response = Client().post(
        "/tasks/multiply/", json.dumps({"a": 6, "b": 7}), content_type="application/json"
    )
    assert response.status_code == 202
    result_id = response.json()["result_id"]
    assert multiply.get_result(result_id).status == TaskResultStatus.READY

    burst()

    result = multiply.get_result(result_id)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 42
    assert result.args == [6, 7]
    assert result.is_finished and result.finished_at is not None
    assert result.attempts == 1


def test_failing_task_reports_its_error_through_django(backend: str) -> None:
    from django_tasks import TaskResultStatus, default_task_backend

    from tests.integrations.django_project.shop.jobs import explode

    enqueued = explode.enqueue("the flux capacitor broke")
    burst()

    result = default_task_backend.get_result(enqueued.id)
    assert result.status == TaskResultStatus.FAILED
    assert len(result.errors) == 1
    assert result.errors[0].exception_class is ValueError
    assert "the flux capacitor broke" in result.errors[0].traceback
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    enqueued.refresh()
    assert enqueued.status == TaskResultStatus.FAILED


def test_task_enqueued_in_a_rolled_back_transaction_is_not_run(backend: str) -> None:
    from django.db import transaction
    from django_tasks.exceptions import TaskResultDoesNotExist

    from tests.integrations.django_project.shop.jobs import multiply

    with pytest.raises(RuntimeError), transaction.atomic(using=backend):
        enqueued = multiply.enqueue(2, 3)
        raise RuntimeError("abort")

    with pytest.raises(TaskResultDoesNotExist):
        multiply.get_result(enqueued.id)


def _check_errors(ratchet: dict[str, Any]) -> str:
    with override_settings(RATCHET=ratchet), pytest.raises(SystemCheckError) as raised:
        call_command("check", stdout=StringIO(), stderr=StringIO())
    return str(raised.value)


def test_check_reports_an_unknown_store_scheme() -> None:
    message = _check_errors(ratchet_settings(store={"url": "oracle://scott@localhost/db"}))
    assert "ratchet.E002" in message
    assert "oracle" in message


def test_check_reports_a_missing_database_driver() -> None:
    # pg8000 is not installed in this environment: SQLAlchemy cannot load the dialect's driver.
    message = _check_errors(ratchet_settings(store={"url": "postgresql+pg8000://u@127.0.0.1/db"}))
    assert "ratchet.E002" in message
    assert "pg8000" in message


def test_check_reports_a_tie_between_alternatives() -> None:
    message = _check_errors(
        ratchet_settings(
            alternatives={"modules": "tests.integrations.django_project.tied_alternatives"}
        )
    )
    assert "ratchet.E003" in message
    assert "FirstRetryPolicy" in message and "SecondRetryPolicy" in message


def test_check_reports_a_malformed_value() -> None:
    message = _check_errors(ratchet_settings(worker={"poll_interval": "soon"}))
    assert "ratchet.E001" in message
    assert "worker.poll_interval" in message


def test_check_passes_for_the_project_settings() -> None:
    call_command("check", stdout=StringIO())


def test_application_container_override_is_listed_by_ratchet_spi() -> None:
    out = StringIO()
    call_command("ratchet_spi", "--json", stdout=out)
    rows = {row["spi"]: row for row in json.loads(out.getvalue())}

    assert rows["RetryPolicy"]["implementation"].endswith("ProjectRetryPolicy")
    assert rows["RetryPolicy"]["priority"] == 2000
    assert rows["AfterCommitRegistrar"]["implementation"].endswith("DjangoAfterCommitRegistrar")


@pytest.fixture
def separate_store(tmp_path: Any) -> Iterator[str]:
    """The store in its own SQLite file, not in a Django database."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    with override_settings(RATCHET=ratchet_settings(store={"url": url})):
        call_command("ratchet_migrate", stdout=StringIO())
        yield url
        get_container().job_store().close()


def _count_jobs(target: str) -> int:
    from ratchet_api.store.entities import JobQuery

    return len(get_scheduler().search(JobQuery(target=target)))


def test_store_in_another_database_commits_enqueue_on_its_own(separate_store: str) -> None:
    from django.db import transaction

    from ratchet_core.contrib.django import enqueue
    from tests.integrations.django_project.shop.jobs import process_order

    assert not app_config().joins_django_transactions()
    with pytest.raises(RuntimeError), transaction.atomic():
        job_id = enqueue(process_order, 1, "default")
        raise RuntimeError("abort")

    # The documented trade-off: a separate store cannot join Django's transaction.
    assert get_scheduler().get(job_id) is not None


def test_enqueue_on_commit_follows_the_django_transaction(separate_store: str) -> None:
    from django.db import transaction

    from ratchet_core.contrib.django.submit import enqueue_on_commit
    from tests.integrations.django_project.shop.jobs import process_order

    target = "tests.integrations.django_project.shop.jobs:process_order"
    before = _count_jobs(target)
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue_on_commit(process_order, 1, "default")
        raise RuntimeError("abort")
    assert _count_jobs(target) == before

    with transaction.atomic():
        enqueue_on_commit(process_order, 2, "default")
        assert _count_jobs(target) == before  # not before the commit
    assert _count_jobs(target) == before + 1


def test_check_reports_an_unimportable_project_container() -> None:
    missing = "tests.integrations.no_such_module.create"
    with override_settings(RATCHET_CONTAINER=missing), pytest.raises(SystemCheckError) as raised:
        call_command("check", stdout=StringIO(), stderr=StringIO())
    assert "ratchet.E004" in str(raised.value)


def test_views_receive_the_project_container_s_scheduler_through_inject(backend: str) -> None:
    from ratchet_core.contrib.django import get_project_container

    response = Client().post("/greet/", {"name": "ada"})

    assert response.status_code == 201
    job = get_scheduler().get(UUID(response.json()["job_id"]))
    assert job is not None and job.target.endswith(":greet")
    project = get_project_container()
    # the project's container is the configured one: its Ratchet store follows DATABASES
    assert project.ratchet.scheduler() is get_scheduler()
    assert "succeeded 1," in burst()


def test_encrypted_tasks_run_and_read_back_through_django() -> None:
    import base64
    import os

    from django_tasks import TaskResultStatus, default_task_backend

    from ratchet_core.payload.envelope import is_envelope
    from tests.integrations.django_project.shop.jobs import explode, multiply

    key = f"k1:{base64.b64encode(os.urandom(32)).decode()}"
    ratchet = ratchet_settings(django={"database": "default"}, encryption={"keys": key})
    with override_settings(RATCHET=ratchet):
        call_command("ratchet_migrate", stdout=StringIO())
        ok = multiply.enqueue(6, 7)
        bad = explode.enqueue("the secret flux capacitor")
        stored = get_scheduler().get(UUID(ok.id))
        assert stored is not None and is_envelope(stored.payload)
        burst()
        result = multiply.get_result(ok.id)
        assert result.status == TaskResultStatus.SUCCESSFUL
        assert result.return_value == 42 and result.args == [6, 7]
        failed = default_task_backend.get_result(bad.id)
        assert failed.status == TaskResultStatus.FAILED
        assert "the secret flux capacitor" in failed.errors[0].traceback
        raw = get_scheduler().get(UUID(bad.id))
        assert raw is not None and is_envelope(raw.last_error)
