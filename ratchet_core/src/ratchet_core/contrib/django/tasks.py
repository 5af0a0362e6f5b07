"""A Django Tasks backend: ``@task`` functions are enqueued, run and tracked by Ratchet.

::

    TASKS = {"default": {"BACKEND": "ratchet_core.contrib.django.tasks.RatchetTaskBackend"}}

Written against Django 6's ``django.tasks``; on Django 5.x it uses the ``django-tasks`` backport
(module ``django_tasks``, the reference implementation ``django.tasks`` was merged from), which
``ratchet-core[django]`` installs. ``task.enqueue()`` writes a Ratchet job whose target is
:func:`execute_django_task` (so the ClassPolicy allowlist covers ``ratchet_core.contrib.django``
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
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar
from uuid import UUID

import attrs
from django.db import close_old_connections
from django.utils import timezone
from django.utils.module_loading import import_string

from ratchet_api.errors import ClassNotAllowedError, JobNotFoundError, RatchetError
from ratchet_api.ids import uuid7_time_ms
from ratchet_api.model import JobStatus, as_priority
from ratchet_api.scheduler import JobContext
from ratchet_core.contrib.django.task_history import (
    AttemptError,
    exception_class_path,
    task_history,
)

if TYPE_CHECKING:  # checked against the backport's typed API
    from django_tasks import TaskResultStatus, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskContext, TaskError, TaskResult
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json

    TASKS_MODULE = "django_tasks"
else:
    try:  # Django >= 6.0
        from django.tasks import TaskResultStatus, task_backends
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import Task, TaskContext, TaskError, TaskResult
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued, task_finished, task_started
        from django.utils.json import normalize_json

        TASKS_MODULE = "django.tasks"
    except ImportError:  # Django 5.x with the django-tasks backport
        from django_tasks import TaskResultStatus, task_backends
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskContext, TaskError, TaskResult
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json

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


def job_priority(priority: int) -> int:
    """Django's -100..100 priority as a Ratchet job priority: the same int (Ratchet's range is
    Django's; Django's default 0 is Ratchet's NORMAL)."""
    return as_priority(int(priority))


def _load_task(task_path: str) -> Task[Any, Any]:
    task = import_string(task_path)
    if not isinstance(task, Task):
        raise TypeError(f"{task_path} is not a Django task (decorate it with @task)")
    return task


def _check_allowed(task_path: str) -> None:
    from ratchet_core.contrib.django import get_container

    if not get_container().class_policy().is_allowed(task_path):
        raise ClassNotAllowedError(task_path, "Django task")


def _task_options(task: Task[Any, Any]) -> dict[str, Any]:
    """What ``task.using(...)`` may have changed, as stored with the job."""
    return {
        "priority": task.priority,
        "queue_name": task.queue_name,
        "run_after": task.run_after.isoformat() if task.run_after is not None else None,
    }


def _with_options(task: Task[Any, Any], options: Mapping[str, Any] | None, alias: str) -> Any:
    """``task`` as it was enqueued: ``task.using(...)`` with the stored options."""
    options = options or {}
    run_after = options.get("run_after")
    return task.using(
        priority=options.get("priority"),
        queue_name=options.get("queue_name"),
        run_after=datetime.fromisoformat(run_after) if run_after else None,
        backend=alias,
    )


def run_django_task(
    task_path: str,
    args: list[Any],
    kwargs: dict[str, Any],
    backend: str | None = None,
    context: JobContext | None = None,
) -> Any:
    """The job target of tasks enqueued by earlier versions (its parameters must not change:
    a worker refuses a job whose target's parameters changed since it was enqueued)."""
    return execute_django_task(task_path, args, kwargs, backend=backend, context=context)


def execute_django_task(
    task_path: str,
    args: list[Any],
    kwargs: dict[str, Any],
    *,
    backend: str | None = None,
    options: dict[str, Any] | None = None,
    context: JobContext | None = None,
) -> Any:
    """The Ratchet job target behind every task: import the ``@task`` named by ``task_path``
    (``module.function``), check it against the ClassPolicy, call it with ``args``/``kwargs``
    (a ``TaskContext`` first when the task ``takes_context``) and return its JSON-normalised
    result. ``context`` is supplied by the worker; ``options`` are the task's ``using()``
    options at enqueue.

    Sends Django's ``task_started`` before the call and ``task_finished`` after it (each
    attempt; status FAILED with the attempt's error when it raised), so the ``django_tasks``
    logger logs as with Django's own backends. A failed attempt's exception class path and
    sanitized traceback are kept for ``get_result``.

    Runs on a worker thread: Django database connections of this thread are closed when
    unusable or past ``CONN_MAX_AGE`` before and after, as Django does around a request."""
    from django.apps import apps

    if not apps.ready:  # `ratchet worker` without manage.py: DJANGO_SETTINGS_MODULE is needed
        import django

        django.setup()
    _check_allowed(task_path)
    alias = backend or _load_task(task_path).backend
    close_old_connections()
    try:
        if context is None:  # called directly, not by a worker: no result to report
            return json_result(_load_task(task_path).call(*args, **kwargs))
        ratchet_backend = backend_for(alias)
        running = ratchet_backend.running_result(task_path, args, kwargs, options, context)
        task = running.task
        task_started.send(sender=type(ratchet_backend), task_result=running)
        try:
            if task.takes_context:
                value = task.call(TaskContext(task_result=running), *args, **kwargs)
            else:
                value = task.call(*args, **kwargs)
            value = json_result(value)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            error = ratchet_backend.record_failure(context, exc)
            failed = _evolve(
                running,
                status=TaskResultStatus.FAILED,
                finished_at=timezone.now(),
                errors=[*running.errors, error],
            )
            task_finished.send(sender=type(ratchet_backend), task_result=failed)
            raise
        finished = _evolve(running, status=TaskResultStatus.SUCCESSFUL, finished_at=timezone.now())
        object.__setattr__(finished, "_return_value", value)
        task_finished.send(sender=type(ratchet_backend), task_result=finished)
        return value
    finally:
        close_old_connections()


def json_result(value: Any) -> Any:
    """``value`` normalised to JSON (tuples become lists, UTF-8 bytes strings), as Django keeps
    a task's return value. A value JSON cannot hold fails the attempt with ``TypeError``
    ``Object of type NAME is not JSON serializable`` (Django's wording, naming the offending
    type, nested or not)."""
    try:
        return normalize_json(value)
    except (TypeError, ValueError) as exc:
        culprit = _not_json(value)
        kind = type(culprit if culprit is not None else value)
        raise TypeError(f"Object of type {kind.__qualname__} is not JSON serializable") from exc


def _not_json(value: Any) -> Any:
    """The first part of ``value`` that ``normalize_json`` refuses (None if none is found)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return None
    if isinstance(value, bytes):
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            return value
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            culprit = _not_json(key)
            if culprit is None:
                culprit = _not_json(item)
            if culprit is not None:
                return culprit
        return None
    if isinstance(value, Sequence):
        return next((c for c in map(_not_json, value) if c is not None), None)
    return value


def _evolve(result: TaskResult[Any], **changes: Any) -> TaskResult[Any]:
    evolved = dataclasses.replace(result, **changes)
    object.__setattr__(evolved, "_return_value", result._return_value)
    return evolved


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
        """Write the task as a Ratchet job and send ``task_enqueued``. Arguments are
        normalised as Django's backends do (tuples become lists, ``bytes`` are decoded as
        UTF-8); anything else that is not JSON raises ``TypeError`` (undecodable bytes
        ``ValueError``), here and not on the worker."""
        from ratchet_core.contrib.django.submit import submit_invocation

        self.validate_task(task)
        args_list: list[Any] = normalize_json(list(args))
        kwargs_dict: dict[str, Any] = normalize_json(dict(kwargs))
        job_id = submit_invocation(
            execute_django_task,
            (task.module_path, args_list, kwargs_dict),
            {"backend": self.alias, "options": _task_options(task)},
            when=task.run_after,
            priority=job_priority(task.priority),
            tags=(
                f"{TASK_TAG_PREFIX}{task.module_path}"[:200],
                f"{QUEUE_TAG_PREFIX}{task.queue_name}"[:200],
            ),
            max_retries=self.max_retries,
            transactional=self.transactional,
        )
        result: TaskResult[T] = self._result(
            task,
            str(job_id),
            TaskResultStatus.READY,
            args_list,
            kwargs_dict,
            enqueued_at=enqueued_at(job_id, None),
        )
        task_enqueued.send(sender=type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult[Any]:
        from ratchet_core.contrib.django import get_container, get_scheduler
        from ratchet_core.payload.codec import PayloadCodec

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
        task = _with_options(
            _load_task(str(task_path)), invocation.kwargs.get("options"), self.alias
        )
        status = task_status(entity.status)
        history = task_history(get_container().job_store(), entity)
        result = self._result(
            task,
            str(job_id),
            status,
            list(args),
            dict(kwargs),
            enqueued_at=enqueued_at(job_id, entity.created_at),
            started_at=history.started_at,
            finished_at=history.finished_at if status in _FINISHED else None,
            last_attempted_at=history.last_attempted_at,
            errors=[_task_error(e) for e in history.errors],
            worker_ids=history.worker_ids,
        )
        if entity.status is JobStatus.SUCCEEDED:
            try:
                value = scheduler.result(job_id).value
            except JobNotFoundError:
                raise TaskResultDoesNotExist(result_id) from None
            object.__setattr__(result, "_return_value", value)
        return result

    def running_result(
        self,
        task_path: str,
        args: list[Any],
        kwargs: dict[str, Any],
        options: Mapping[str, Any] | None,
        context: JobContext,
    ) -> TaskResult[Any]:
        """The result of the attempt ``context`` describes, as it starts on this worker (what
        ``task_started`` receivers and a ``TaskContext`` get). Reads the store only for a
        retried task (the earlier attempts' times and errors)."""
        from ratchet_core.contrib.django import get_container

        container = get_container()
        task = _with_options(_load_task(task_path), options, self.alias)
        now = timezone.now()
        started_at: datetime = now
        errors: list[Any] = []
        workers: list[str] = []
        if context.attempt > 1:
            store = container.job_store()
            entity = store.find_by_id(context.job_id)
            if entity is not None:
                history = task_history(store, entity)
                started_at = history.started_at or now
                errors = [_task_error(e) for e in history.errors]
                workers = history.worker_ids[: context.attempt - 1]
        workers.append(container.node_identity_provider().get_node_id())
        return self._result(
            task,
            str(context.job_id),
            TaskResultStatus.RUNNING,
            args,
            kwargs,
            enqueued_at=enqueued_at(context.job_id, None),
            started_at=started_at,
            last_attempted_at=now,
            errors=errors,
            worker_ids=workers,
        )

    def record_failure(self, context: JobContext, error: BaseException) -> Any:
        """Keep the failed attempt's exception class path and sanitized traceback (the
        project's ``ErrorSanitizer``) with the job; the ``TaskError`` for it."""
        from ratchet_core.contrib.django import get_container
        from ratchet_core.contrib.django.task_history import record_failure
        from ratchet_core.contrib.django.tracebacks import sanitized_traceback

        container = get_container()
        kind = type(error)
        path = f"{kind.__module__}.{kind.__qualname__}"
        traceback = sanitized_traceback(error, container.error_sanitizer())
        record_failure(container.job_store(), context.job_id, context.attempt, path, traceback)
        return TaskError(exception_class_path=path, traceback=traceback)

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


def enqueued_at(job_id: UUID, created_at: datetime | None) -> datetime | None:
    """When the task was enqueued: the millisecond a UUIDv7 job id encodes (known at enqueue
    and the same on every read, so the enqueued result equals a fetched one), else
    ``created_at``."""
    if job_id.version != 7:
        return created_at
    millis = uuid7_time_ms(job_id)
    return datetime.fromtimestamp(millis // 1000, UTC) + timedelta(milliseconds=millis % 1000)


def _task_error(error: AttemptError) -> Any:
    return TaskError(exception_class_path=error.exception_class_path, traceback=error.traceback)


__all__ = [
    "TASKS_MODULE",
    "RatchetTaskBackend",
    "backend_for",
    "enqueued_at",
    "exception_class_path",
    "execute_django_task",
    "json_result",
    "job_priority",
    "run_django_task",
    "task_status",
]
