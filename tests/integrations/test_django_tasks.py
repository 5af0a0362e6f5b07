"""The Ratchet Tasks backend behaves as Django's own backends do: results, ``using()``
options, signals and the ``django_tasks`` log lines, errors with tracebacks per attempt,
argument normalisation, start times and queues. A real project (pytest-django) on SQLite and
PostgreSQL; the worker is ``manage.py ratchet_worker`` in this process. Django's
``ImmediateBackend`` (alias ``immediate``) is the reference where behaviour is compared."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone
from django_tasks import TaskResultStatus, default_task_backend, task_backends
from django_tasks.signals import task_enqueued, task_finished, task_started

from ratchet_core.contrib.django import get_container
from tests.integrations.django_support import backend, burst

__all__ = ["backend"]  # the fixture, imported for its tests

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


@pytest.fixture(autouse=True, scope="module")
def _close_stores() -> Iterator[None]:
    yield
    get_container().job_store().close()


def test_enqueued_result_equals_the_fetched_one_until_it_runs(backend: str) -> None:
    from tests.integrations.django_project.shop.jobs import multiply

    later = timezone.now() + timedelta(hours=1)
    task = multiply.using(priority=50, queue_name="emails", run_after=later)

    enqueued = task.enqueue(6, 7)
    fetched = default_task_backend.get_result(enqueued.id)

    assert enqueued.enqueued_at is not None
    assert fetched == enqueued
    assert fetched.task.priority == 50
    assert fetched.task.queue_name == "emails"
    assert fetched.task.run_after == later
    assert fetched.task.backend == "default"
    before = enqueued.enqueued_at
    enqueued.refresh()
    assert enqueued.enqueued_at == before


def test_aenqueue_returns_a_result_with_enqueued_at(backend: str) -> None:
    from tests.integrations.django_project.shop.jobs import multiply

    enqueued = async_to_sync(multiply.aenqueue)(2, 3)

    assert enqueued.enqueued_at is not None
    assert default_task_backend.get_result(enqueued.id) == enqueued
    burst()  # leave no pending job to the next test


class _Received:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, Any, str]] = []
        self._lock = threading.Lock()

    def receiver(self, name: str) -> Any:
        def receive(sender: type, task_result: Any, **kwargs: Any) -> None:
            with self._lock:
                self.events.append(
                    (name, task_result.id, task_result.status, threading.current_thread().name)
                )

        return receive

    def of(self, result_id: str) -> list[tuple[str, Any]]:
        return [(name, status) for name, rid, status, _ in self.events if rid == result_id]


@pytest.fixture
def received() -> Iterator[_Received]:
    seen = _Received()
    receivers = {
        task_enqueued: seen.receiver("enqueued"),
        task_started: seen.receiver("started"),
        task_finished: seen.receiver("finished"),
    }
    for signal, receiver in receivers.items():
        signal.connect(receiver, weak=False)
    yield seen
    for signal, receiver in receivers.items():
        signal.disconnect(receiver)


def test_signals_are_sent_in_order_and_start_and_finish_on_the_worker(
    backend: str, received: _Received, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.integrations.django_project.shop.jobs import explode, multiply

    caplog.set_level(logging.DEBUG, logger="django_tasks")
    ok = multiply.enqueue(3, 4)
    bad = explode.enqueue("boom")
    assert received.of(ok.id) == [("enqueued", TaskResultStatus.READY)]

    burst()

    assert received.of(ok.id) == [
        ("enqueued", TaskResultStatus.READY),
        ("started", TaskResultStatus.RUNNING),
        ("finished", TaskResultStatus.SUCCESSFUL),
    ]
    assert received.of(bad.id) == [
        ("enqueued", TaskResultStatus.READY),
        ("started", TaskResultStatus.RUNNING),
        ("finished", TaskResultStatus.FAILED),
    ]
    main = threading.main_thread().name
    threads = {name: thread for name, rid, _, thread in received.events if rid == ok.id}
    assert threads["enqueued"] == main
    assert threads["started"] != main and threads["finished"] != main  # the worker's threads

    messages = [(r.levelno, r.getMessage(), r.exc_info is not None) for r in caplog.records]
    path = "tests.integrations.django_project.shop.jobs"
    assert (
        logging.DEBUG,
        f"Task id={ok.id} path={path}.multiply enqueued backend=default",
        False,
    ) in messages
    assert (logging.INFO, f"Task id={ok.id} path={path}.multiply state=RUNNING", False) in messages
    assert (
        logging.INFO,
        f"Task id={ok.id} path={path}.multiply state=SUCCESSFUL",
        False,
    ) in messages
    # a failure is logged with logger.exception, as Django's backends do
    assert (logging.ERROR, f"Task id={bad.id} path={path}.explode state=FAILED", True) in messages


def test_the_worker_s_result_matches_the_signal_s_and_the_stored_one(
    backend: str, received: _Received
) -> None:
    from tests.integrations.django_project.shop.jobs import multiply

    captured: list[Any] = []

    def keep(sender: type, task_result: Any, **kwargs: Any) -> None:
        if task_result.id == enqueued.id:
            captured.append(task_result)

    task_finished.connect(keep, weak=False)
    try:
        enqueued = multiply.enqueue(5, 5)
        burst()
    finally:
        task_finished.disconnect(keep)

    stored = default_task_backend.get_result(enqueued.id)
    (finished,) = captured
    assert finished.return_value == stored.return_value == 25
    assert finished.worker_ids == stored.worker_ids
    assert len(stored.worker_ids) == 1
    assert finished.enqueued_at == stored.enqueued_at == enqueued.enqueued_at


def test_failed_attempts_each_carry_class_path_and_sanitized_traceback(backend: str) -> None:
    from tests.integrations.django_project.shop.jobs import always_fails

    enqueued = always_fails.using(backend="retrying").enqueue("tok_secret")
    result = task_backends["retrying"].get_result(enqueued.id)
    deadline = time.monotonic() + 60
    while not result.is_finished and time.monotonic() < deadline:
        burst()  # the retry becomes due after its backoff
        result.refresh()
        if not result.is_finished:
            time.sleep(0.2)

    assert result.status == TaskResultStatus.FAILED
    assert len(result.errors) == 2  # MAX_RETRIES 1: two attempts, one error each
    assert result.attempts == 2
    for error in result.errors:
        assert error.exception_class_path == "builtins.RuntimeError"
        assert error.exception_class is RuntimeError
        text = error.traceback
        assert text.startswith("Traceback (most recent call last):")
        assert "KeyError" in text
        assert "The above exception was the direct cause of the following exception" in text
        assert 'File "' in text and "always_fails" in text
        assert text.rstrip().splitlines()[-1].startswith("RuntimeError: payment with token=")
        assert "tok_secret" not in text.rstrip().splitlines()[-1], text  # sanitized


def test_argument_normalisation_and_errors_match_django_s_backend(backend: str) -> None:
    from tests.integrations.django_project.shop.jobs import echo

    reference = echo.using(backend="immediate").enqueue(b"caf\xc3\xa9", items=(1, (2, 3)))
    ours = echo.enqueue(b"caf\xc3\xa9", items=(1, (2, 3)))

    assert ours.args == reference.args == ["café"]
    assert ours.kwargs == reference.kwargs == {"items": [1, [2, 3]]}
    assert default_task_backend.get_result(ours.id).args == ["café"]
    for bad in (object(), {1, 2}, timezone.now()):
        with pytest.raises(TypeError) as django_error:
            echo.using(backend="immediate").enqueue(bad)
        with pytest.raises(TypeError) as ratchet_error:
            echo.enqueue(bad)
        assert str(ratchet_error.value) == str(django_error.value)
    with pytest.raises(ValueError):
        echo.using(backend="immediate").enqueue(b"\xff")
    with pytest.raises(ValueError):
        echo.enqueue(b"\xff")

    burst()
    done = default_task_backend.get_result(ours.id)
    assert done.return_value == reference.return_value == "café"


def test_started_at_is_when_the_task_ran_not_when_it_was_claimed(backend: str) -> None:
    from tests.integrations.django_project.shop.jobs import nap

    first, second = nap.enqueue(0.3), nap.enqueue(0.3)
    burst("-c", "1", "--prefetch", "1")

    results = sorted(
        (default_task_backend.get_result(r.id) for r in (first, second)),
        key=lambda r: r.started_at,
    )
    assert all(r.status == TaskResultStatus.SUCCESSFUL for r in results)
    earlier, later = results
    assert earlier.finished_at is not None and later.started_at is not None
    assert later.started_at >= earlier.finished_at
    assert later.last_attempted_at == later.started_at


def test_a_worker_with_queue_runs_only_that_queue_s_tasks(backend: str) -> None:
    from tests.integrations.django_project.shop.jobs import multiply

    email = multiply.using(queue_name="emails").enqueue(2, 2)
    other = multiply.enqueue(3, 3)

    burst("--queue", "emails")

    assert default_task_backend.get_result(email.id).status == TaskResultStatus.SUCCESSFUL
    assert default_task_backend.get_result(other.id).status == TaskResultStatus.READY
    burst()
    assert default_task_backend.get_result(other.id).status == TaskResultStatus.SUCCESSFUL


def test_jobs_list_shows_each_task_s_own_path(backend: str) -> None:
    from io import StringIO

    from django.core.management import call_command

    from tests.integrations.django_project.shop.jobs import echo, multiply

    multiply.enqueue(1, 2)
    echo.enqueue("x")
    table = StringIO()
    call_command("ratchet_jobs", "list", "--status", "pending", stdout=table)
    listed = StringIO()
    call_command("ratchet_jobs", "list", "--json", "--status", "pending", stdout=listed)

    path = "tests.integrations.django_project.shop.jobs"
    assert f"{path}.multiply (django task)" in table.getvalue()
    assert f"{path}.echo (django task)" in table.getvalue()
    records = [json.loads(line) for line in listed.getvalue().splitlines()]
    assert {r["django_task"] for r in records} >= {f"{path}.multiply", f"{path}.echo"}
    burst()  # leave no pending job to the next test (the store's tables outlive each test)


def test_integer_priorities_order_tasks_exactly(backend: str) -> None:
    from tests.integrations.django_project.shop.jobs import nap

    priorities = [10, 50, -20, 100, 0]
    enqueued = {p: nap.using(priority=p).enqueue(0.01) for p in priorities}

    burst("-c", "1", "--prefetch", "0")

    results = {p: default_task_backend.get_result(r.id) for p, r in enqueued.items()}
    ran = sorted(priorities, key=lambda p: results[p].started_at)
    assert ran == sorted(priorities, reverse=True)  # 100, 50, 10, 0, -20
    assert results[50].task.priority == 50
