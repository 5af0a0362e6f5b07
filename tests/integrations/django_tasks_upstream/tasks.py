"""The tasks upstream's suite imports as ``tests.tasks`` (its sdist does not ship them): written
here from the names and behaviour its tests expect."""

from __future__ import annotations

import time
from typing import Any

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task


@task()
def noop_task(*args: Any, **kwargs: Any) -> None:
    return None


@task()
async def noop_task_async(*args: Any, **kwargs: Any) -> None:
    return None


@task()
def calculate_meaning_of_life() -> int:
    return 42


@task()
def failing_task_value_error() -> None:
    raise ValueError("This task failed due to ValueError")


@task()
def failing_task_system_exit() -> None:
    raise SystemExit("This task failed due to SystemExit")


@task()
def failing_task_keyboard_interrupt() -> None:
    raise KeyboardInterrupt("This task failed due to KeyboardInterrupt")


@task()
def complex_exception() -> None:
    raise ValueError(ValueError("This task failed"))


@task()
def complex_return_value() -> Any:
    return {1, 2}  # a set: JSON cannot hold it


@task()
def exit_task() -> None:
    raise SystemExit(1)


@task(takes_context=True)
def get_task_id(context: Any) -> str:
    return str(context.task_result.id)


@task(takes_context=True)
def test_context(context: Any, attempt: int) -> None:
    assert context.attempt == attempt


@task()
def hang() -> None:
    while True:
        time.sleep(0.1)


@task()
def sleep_for(seconds: float) -> None:
    time.sleep(seconds)
