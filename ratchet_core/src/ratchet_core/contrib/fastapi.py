"""Ratchet for FastAPI and other ASGI (Starlette) applications.

::

    from ratchet_core.contrib.fastapi import Scheduler, aenqueue, ratchet_lifespan

    app = FastAPI(lifespan=ratchet_lifespan(create_container))

    @app.post("/reports")
    async def create_report(scheduler: Scheduler) -> dict[str, str]:
        job_id = await aenqueue(scheduler, build_report, 42)
        return {"job_id": str(job_id)}

Enqueueing writes to the database with a blocking driver, so :func:`aenqueue` runs it on a
worker thread (``anyio.to_thread.run_sync``): the event loop keeps serving other requests while
the insert waits for the database. ``ratchet_lifespan(..., run_worker=True)`` also runs a worker
inside the server process (handy for development and small deployments; run ``ratchet worker``
processes otherwise).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime, timedelta
from typing import Annotated, Any
from uuid import UUID

import anyio.to_thread
from starlette.requests import HTTPConnection

from ratchet_api.scheduler import JobScheduler
from ratchet_core.runtime.container import (
    RatchetContainer,
    RatchetDynamicContainer,
    find_ratchet_container,
)

STATE_KEY = "ratchet"


def _build(container: Any) -> tuple[Any, RatchetDynamicContainer]:
    from dependency_injector import containers

    if container is None:
        app_container: Any = RatchetContainer()
    elif (
        isinstance(container, type) and issubclass(container, containers.DeclarativeContainer)
    ) or (callable(container) and not isinstance(container, containers.Container)):
        app_container = container()
    else:
        app_container = container
    ratchet = find_ratchet_container(app_container)
    ratchet.ensure_built()
    return app_container, ratchet


def ratchet_lifespan(
    container: Any = None,
    *,
    run_worker: bool = False,
    stop_timeout: float | None = 30.0,
) -> Callable[[Any], AbstractAsyncContextManager[dict[str, Any]]]:
    """A lifespan for ``FastAPI(lifespan=...)`` / ``Starlette(lifespan=...)``.

    ``container`` is the application's container nesting Ratchet's (an instance, a class or a
    zero-argument factory), or None for a ``RatchetContainer`` configured from the environment
    and ``ratchet.toml``. At startup the container is built (alternatives applied: a bad
    deployment fails the startup) and put in the lifespan state (``request.state.ratchet``)
    and ``app.state.ratchet``; with ``run_worker`` a worker is started. At shutdown the worker
    stops gracefully (``stop_timeout``) and the store is closed."""

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[dict[str, Any]]:
        _, ratchet = await anyio.to_thread.run_sync(_build, container)
        app.state.ratchet = ratchet
        worker = None
        if run_worker:
            worker = ratchet.worker()
            await anyio.to_thread.run_sync(worker.start)
        try:
            yield {STATE_KEY: ratchet}
        finally:
            if worker is not None:
                await anyio.to_thread.run_sync(functools.partial(worker.stop, stop_timeout))
            await anyio.to_thread.run_sync(ratchet.job_store().close)

    return lifespan


def get_container(connection: HTTPConnection) -> RatchetDynamicContainer:
    """The Ratchet container of the running application (a FastAPI dependency). ``LookupError``
    when the app was not started with :func:`ratchet_lifespan`."""
    container = getattr(connection.state, STATE_KEY, None)
    if container is None:
        container = getattr(connection.app.state, STATE_KEY, None)
    if not isinstance(container, RatchetDynamicContainer):
        raise LookupError(
            "Ratchet is not set up on this application: create it with "
            "FastAPI(lifespan=ratchet_lifespan(...))"
        )
    return container


def get_scheduler(connection: HTTPConnection) -> JobScheduler:
    """The scheduler of the running application (a FastAPI dependency)."""
    scheduler: JobScheduler = get_container(connection).scheduler()
    return scheduler


try:
    from fastapi import Depends
except ImportError:  # plain Starlette: call get_scheduler(request) yourself
    pass
else:
    Scheduler = Annotated[JobScheduler, Depends(get_scheduler)]
    """Type of an endpoint parameter receiving the scheduler: ``scheduler: Scheduler``."""


async def aenqueue(
    scheduler: JobScheduler, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
) -> UUID:
    """``scheduler.enqueue(fn, *args, **kwargs)`` on a worker thread, so the event loop is not
    blocked while the database answers. Validation errors are raised here, as with ``enqueue``."""
    job_id: UUID = await anyio.to_thread.run_sync(
        functools.partial(scheduler.enqueue, fn, *args, **kwargs)
    )
    return job_id


async def aschedule(
    scheduler: JobScheduler,
    at_or_delay: datetime | timedelta | float,
    fn: Callable[..., Any],
    /,
    *args: Any,
    **kwargs: Any,
) -> UUID:
    """``scheduler.schedule(...)`` on a worker thread (see :func:`aenqueue`)."""
    job_id: UUID = await anyio.to_thread.run_sync(
        functools.partial(scheduler.schedule, at_or_delay, fn, *args, **kwargs)
    )
    return job_id


async def arun_sync(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Any other blocking scheduler call (``get``, ``result``, ``cancel``...) on a worker
    thread: ``await arun_sync(scheduler.result, job_id)``."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))


__all__ = [
    "STATE_KEY",
    "Scheduler",
    "aenqueue",
    "arun_sync",
    "aschedule",
    "get_container",
    "get_scheduler",
    "ratchet_lifespan",
]
