"""A Django Tasks backend: ``@task`` functions are enqueued, run and tracked by Ratchet.

::

    TASKS = {"default": {"BACKEND": "ratchet_core.contrib.django.tasks.RatchetTaskBackend"}}

Written against Django 6's ``django.tasks``; on Django 5.x it uses the ``django-tasks`` backport
(module ``django_tasks``, the reference implementation ``django.tasks`` was merged from), which
``ratchet-core[django]`` installs. ``task.enqueue()`` writes a Ratchet job whose target is
:func:`run_django_task` (so the ClassPolicy allowlist covers ``ratchet_core.contrib.django``
and the task's own module); ``TaskResult.id`` is the job id; ``get_result`` and
``TaskResult.refresh()`` read status, return value and errors back from the Ratchet store.

Status mapping: PENDING/PAUSED/WAITING/AWAITING_SIGNAL -> READY, RUNNING -> RUNNING,
SUCCEEDED -> SUCCESSFUL, FAILED/CANCELLED -> FAILED. A task that raised and will be retried is
READY again (Django's "ready to be executed again"), with its error in ``errors``.

``OPTIONS``: ``MAX_RETRIES`` (default: Ratchet's ``max_retries``; Django's own backends do not
retry, so ``0`` gives their behaviour) and ``TRANSACTIONAL`` (default True: inside
``transaction.atomic()`` the job is written on Django's connection and rolls back with it).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar
from uuid import UUID

import attrs
from django.db import close_old_connections
from django.utils.module_loading import import_string

from ratchet_api.errors import ClassNotAllowedError, JobNotFoundError, RatchetError
from ratchet_api.model import JobPriority, JobStatus
from ratchet_api.scheduler import JobContext
from ratchet_api.store.entities import JobEntity

if TYPE_CHECKING:  # checked against the backport's typed API
    from django_tasks import TaskResultStatus, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskContext, TaskError, TaskResult
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist

    TASKS_MODULE = "django_tasks"
else:
    try:  # Django >= 6.0
        from django.tasks import TaskResultStatus, task_backends
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import Task, TaskContext, TaskError, TaskResult
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist

        TASKS_MODULE = "django.tasks"
    except ImportError:  # Django 5.x with the django-tasks backport
        from django_tasks import TaskResultStatus, task_backends
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskContext, TaskError, TaskResult
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist

        TASKS_MODULE = "django_tasks"

T = TypeVar("T")

_STATUS = {
    JobStatus.PENDING: TaskResultStatus.READY,
    JobStatus.PAUSED: TaskResultStatus.READY,
    JobStatus.WAITING: TaskResultStatus.READY,
    JobStatus.AWAITING_SIGNAL: TaskResultStatus.READY,
    JobStatus.RUNNING: TaskResultStatus.RUNNING,
    JobStatus.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    JobStatus.FAILED: TaskResultStatus.FAILED,
    JobStatus.CANCELLED: TaskResultStatus.FAILED,
}

TASK_TAG_PREFIX = "django-task:"
QUEUE_TAG_PREFIX = "django-queue:"


def task_status(status: JobStatus) -> Any:
    """The Django ``TaskResultStatus`` of a Ratchet job status."""
    return _STATUS[status]


def job_priority(priority: int) -> JobPriority:
    """Django's -100..100 priority as a Ratchet claim priority (higher runs sooner)."""
    if priority < 0:
        return JobPriority.LOW
    if priority == 0:
        return JobPriority.NORMAL
    if priority <= 50:
        return JobPriority.HIGH
    return JobPriority.CRITICAL


def _json_value(value: Any) -> Any:
    """The task's return value as JSON (what Django's backends store), or a clear error."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"a task's return value must be JSON serializable: {exc}") from exc


def _load_task(task_path: str) -> Task[Any, Any]:
    task = import_string(task_path)
    if not isinstance(task, Task):
        raise TypeError(f"{task_path} is not a Django task (decorate it with @task)")
    return task


def _check_allowed(task_path: str) -> None:
    from ratchet_core.contrib.django import get_container

    if not get_container().class_policy().is_allowed(task_path):
        raise ClassNotAllowedError(task_path, "Django task")


def run_django_task(
    task_path: str,
    args: list[Any],
    kwargs: dict[str, Any],
    backend: str | None = None,
    context: JobContext | None = None,
) -> Any:
    """The Ratchet job target behind every task: import the ``@task`` named by ``task_path``
    (``module.function``), check it against the ClassPolicy, call it with ``args``/``kwargs``
    (a ``TaskContext`` first when the task ``takes_context``; its result is this job's, read
    from the store) and return its JSON result. ``context`` is supplied by the worker.

    Runs on a worker thread: Django database connections of this thread are closed when
    unusable or past ``CONN_MAX_AGE`` before and after, as Django does around a request."""
    from django.apps import apps

    if not apps.ready:  # `ratchet worker` without manage.py: DJANGO_SETTINGS_MODULE is needed
        import django

        django.setup()
    _check_allowed(task_path)
    task = _load_task(task_path)
    close_old_connections()
    try:
        if task.takes_context:
            alias = backend or task.backend
            if context is None:
                raise RuntimeError(f"{task_path} takes a context: run it on a Ratchet worker")
            context_result = backend_for(alias).get_result(str(context.job_id))
            value = task.call(TaskContext(task_result=context_result), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
        return _json_value(value)
    finally:
        close_old_connections()


def backend_for(alias: str) -> RatchetTaskBackend:
    """The configured backend ``alias``; ``InvalidTask`` when it is not a Ratchet backend."""
    backend = task_backends[alias]
    if not isinstance(backend, RatchetTaskBackend):
        raise InvalidTask(f"task backend {alias!r} is {type(backend).__name__}, not Ratchet's")
    return backend


class RatchetTaskBackend(BaseTaskBackend):
    """Runs Django tasks on Ratchet workers (``manage.py ratchet_worker``)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        options = {str(k).upper(): v for k, v in dict(self.options).items()}
        retries = options.get("MAX_RETRIES")
        if retries is not None and (not isinstance(retries, int) or retries < 0):
            raise InvalidTask(f"TASKS[{alias!r}]['OPTIONS']['MAX_RETRIES'] must be an int >= 0")
        self.max_retries: int | None = retries
        self.transactional = bool(options.get("TRANSACTIONAL", True))

    def validate_task(self, task: Task[Any, Any]) -> None:
        super().validate_task(task)
        # Fails at definition/enqueue time, not on the worker.
        try:
            _check_allowed(task.module_path)
        except ClassNotAllowedError as exc:
            raise InvalidTask(str(exc)) from exc

    def enqueue(
        self, task: Task[Any, T], args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> TaskResult[T]:
        from ratchet_core.contrib.django.submit import submit_invocation

        self.validate_task(task)
        args_list = _normalize(list(args), "args")
        kwargs_dict = _normalize(dict(kwargs), "kwargs")
        job_id = submit_invocation(
            run_django_task,
            (task.module_path, args_list, kwargs_dict),
            {"backend": self.alias},
            when=task.run_after,
            priority=job_priority(task.priority),
            tags=(
                f"{TASK_TAG_PREFIX}{task.module_path}"[:200],
                f"{QUEUE_TAG_PREFIX}{task.queue_name}"[:200],
            ),
            max_retries=self.max_retries,
            transactional=self.transactional,
        )
        return self._result(
            task,
            str(job_id),
            TaskResultStatus.READY,
            args_list,
            kwargs_dict,
            enqueued_at=None,
        )

    def get_result(self, result_id: str) -> TaskResult[Any]:
        from ratchet_core.codec import PayloadCodec
        from ratchet_core.contrib.django import get_scheduler

        try:
            job_id = UUID(str(result_id))
        except ValueError:
            raise TaskResultDoesNotExist(f"{result_id!r} is not a Ratchet job id") from None
        scheduler = get_scheduler()
        entity = scheduler.get(job_id)
        if entity is None:
            raise TaskResultDoesNotExist(result_id)
        try:
            codec: PayloadCodec = getattr(scheduler, "codec", None) or PayloadCodec.disabled()
            invocation = codec.open_invocation(entity)  # decrypted when encrypted
            entity = attrs.evolve(entity, last_error=codec.open_error(entity))
            task_path, args, kwargs = invocation.args[0], invocation.args[1], invocation.args[2]
        except (RatchetError, IndexError, ValueError) as exc:
            raise TaskResultDoesNotExist(f"job {job_id} is not a Django task: {exc}") from exc
        task = _load_task(str(task_path))
        status = task_status(entity.status)
        result = self._result(
            task,
            str(job_id),
            status,
            list(args),
            dict(kwargs),
            enqueued_at=entity.created_at,
            started_at=entity.started_at,
            finished_at=entity.finished_at if status in _FINISHED else None,
            last_attempted_at=entity.started_at,
            errors=_errors(entity),
            worker_ids=_worker_ids(entity),
        )
        if entity.status is JobStatus.SUCCEEDED:
            try:
                value = scheduler.result(job_id).value
            except JobNotFoundError:
                raise TaskResultDoesNotExist(result_id) from None
            object.__setattr__(result, "_return_value", value)
        return result

    def _result(
        self,
        task: Task[Any, T],
        result_id: str,
        status: Any,
        args: list[Any],
        kwargs: dict[str, Any],
        *,
        enqueued_at: datetime | None,
        started_at: datetime | None = None,
        finished_at: datetime | None = None,
        last_attempted_at: datetime | None = None,
        errors: list[Any] | None = None,
        worker_ids: list[str] | None = None,
    ) -> TaskResult[T]:
        values: dict[str, Any] = {
            "task": task,
            "id": result_id,
            "status": status,
            "enqueued_at": enqueued_at,
            "started_at": started_at,
            "finished_at": finished_at,
            "last_attempted_at": last_attempted_at,
            "args": args,
            "kwargs": kwargs,
            "backend": self.alias,
            "errors": errors or [],
            "worker_ids": worker_ids or [],
        }
        accepted = {f.name for f in dataclasses.fields(TaskResult) if f.init}
        result: TaskResult[T] = TaskResult(**{k: v for k, v in values.items() if k in accepted})
        return result

    def check(self, **kwargs: Any) -> Iterable[Any]:
        from django.apps import apps

        from ratchet_core.contrib.django.checks import task_backend_messages

        if not apps.is_installed("ratchet_core.contrib.django"):
            from django.core import checks

            yield checks.Error(
                "the Ratchet task backend needs Ratchet's Django app",
                hint="add 'ratchet_core.contrib.django' to INSTALLED_APPS",
                obj=f"TASKS[{self.alias!r}]",
                id="ratchet.E010",
            )
            return
        yield from task_backend_messages(self)


_FINISHED = frozenset({TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED})


def _normalize(value: Any, what: str) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise InvalidTask(f"task {what} must be JSON serializable: {exc}") from exc


def _errors(entity: JobEntity) -> list[Any]:
    """The job's last error as Django ``TaskError`` (Ratchet keeps the last one per job)."""
    if not entity.last_error:
        return []
    return [
        TaskError(
            exception_class_path=exception_class_path(entity.last_error),
            traceback=entity.last_error,
        )
    ]


def exception_class_path(error: str) -> str:
    """The dotted exception class named at the start of a stored error
    (``"mypkg.errors.PaymentError: card declined"`` or ``"ValueError: bad"``); builtins get
    the ``builtins.`` prefix Django's ``TaskError.exception_class`` imports."""
    head = error.strip().splitlines()[0] if error.strip() else ""
    if head.startswith("Traceback"):
        lines = [line for line in error.strip().splitlines() if line and not line[0].isspace()]
        head = lines[-1] if lines else ""
    name = head.split(":", 1)[0].strip()
    if not name or " " in name:
        return "builtins.Exception"
    return name if "." in name else f"builtins.{name}"


def _worker_ids(entity: JobEntity) -> list[str]:
    return [entity.owner or "ratchet"] * entity.attempt


__all__ = [
    "TASKS_MODULE",
    "RatchetTaskBackend",
    "backend_for",
    "exception_class_path",
    "job_priority",
    "run_django_task",
    "task_status",
]
