"""Ratchet for Flask: ``Ratchet(app)`` or ``ratchet.init_app(app)`` (application factories).

* configuration: ``RATCHET_*`` keys of ``app.config`` (``RATCHET_STORE_URL`` is ``store.url``,
  ``RATCHET_WORKER_CONCURRENCY`` is ``worker.concurrency``: the same names as the environment
  variables), above the environment and ``ratchet.toml``. Without ``RATCHET_STORE_URL`` and with
  Flask-SQLAlchemy in use, the store is Flask-SQLAlchemy's default engine URL;
* the container: pass the application's dependency-injector container (one nesting
  ``ratchet = providers.Container(RatchetContainer)``) to use its overrides and to let views
  receive the scheduler with ``@inject`` / ``Provide[Container.ratchet.scheduler]``; without one a
  ``RatchetContainer`` is created;
* :func:`get_scheduler` / ``current_app.extensions["ratchet"].scheduler`` in views;
* :func:`enqueue`: with Flask-SQLAlchemy, the job row is written in ``db.session``'s transaction
  (``db.session.commit()`` commits it with the view's rows, a rollback removes it) and wake-ups
  are sent after the session commits (the default ``AfterCommitRegistrar`` listens on the
  session);
* ``flask ratchet worker|db|spi|jobs|enqueue``: Ratchet's commands (``ratchet worker`` ...,
  the same options) on this app's container.

See ``docs/flask.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import attrs
import click
from flask import Flask, current_app
from flask.cli import ScriptInfo

from ratchet_api.scheduler import JobScheduler
from ratchet_core.contrib import insert_config_source, new_ratchet_container
from ratchet_core.runtime.container import (
    RatchetDynamicContainer,
    find_ratchet_container,
)

EXTENSION_KEY = "ratchet"
CONFIG_PREFIX = "RATCHET_"


class FlaskConfigSource:
    """``RATCHET_*`` keys of a Flask ``app.config``, looked up by the key's environment variable
    name (``store.url`` -> ``RATCHET_STORE_URL``). ``store.url`` falls back to Flask-SQLAlchemy's
    default engine when the application uses it."""

    description = "Flask app.config (RATCHET_*)"

    def __init__(self, app: Flask) -> None:
        self._app = app

    def get(self, property_name: str, environment_variable: str) -> str | None:
        from ratchet_core.runtime.config import _to_raw

        value = self._app.config.get(environment_variable)
        if value is None and property_name == "store.url":
            return sqlalchemy_url(self._app)
        return None if value is None else _to_raw(value)


def _sqlalchemy_extension(app: Flask) -> Any:
    return app.extensions.get("sqlalchemy")


def sqlalchemy_url(app: Flask) -> str | None:
    """The URL of Flask-SQLAlchemy's default engine (instance-relative SQLite paths resolved),
    or None when the application does not use Flask-SQLAlchemy."""
    db = _sqlalchemy_extension(app)
    if db is None:
        return None
    with app.app_context():
        url: str = db.engine.url.render_as_string(hide_password=False)
    return url


@attrs.define
class RatchetState:
    """What ``app.extensions["ratchet"]`` holds."""

    app_container: Any
    """The application's container (or the Ratchet container when the app gave none)."""
    container: RatchetDynamicContainer
    """The Ratchet container (nested in ``app_container``), built."""

    @property
    def scheduler(self) -> JobScheduler:
        scheduler: JobScheduler = self.container.scheduler()
        return scheduler


class Ratchet:
    """The Flask extension. ``Ratchet(app, container=AppContainer())`` or, with an application
    factory, ``ratchet = Ratchet()`` at module level and ``ratchet.init_app(app)`` in the
    factory.

    ``container`` is the application's dependency-injector container nesting the Ratchet
    container (an instance, or a class / zero-argument factory called per app); ``wire`` lists
    modules (or packages) whose ``@inject`` functions get their ``Provide[...]`` markers wired.
    """

    def __init__(
        self,
        app: Flask | None = None,
        *,
        container: Any = None,
        wire: Iterable[str] = (),
    ) -> None:
        self._container_spec = container
        self._wire = tuple(wire)
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> RatchetState:
        """Configure ``app``: build the container with ``app.config``'s ``RATCHET_*`` keys,
        wire views, register ``flask ratchet``. Raises ``DeploymentError`` /
        ``ConfigurationError`` for a bad configuration (at startup, not at the first job)."""
        app_container = _instantiate(self._container_spec)
        ratchet = (
            new_ratchet_container()
            if app_container is None
            else find_ratchet_container(app_container)
        )
        insert_config_source(ratchet, FlaskConfigSource(app))
        ratchet.build()
        if self._wire and app_container is not None:
            app_container.wire(modules=[m for m in self._wire], packages=[])
        state = RatchetState(
            app_container=app_container if app_container is not None else ratchet,
            container=ratchet,
        )
        app.extensions[EXTENSION_KEY] = state
        if "ratchet" not in app.cli.commands:
            app.cli.add_command(ratchet_cli)
        return state

    @staticmethod
    def state(app: Flask | None = None) -> RatchetState:
        """The Ratchet state of ``app`` (default ``current_app``)."""
        return get_state(app)


def _instantiate(spec: Any) -> Any:
    from dependency_injector import containers

    if spec is None:
        return None
    if isinstance(spec, type) and issubclass(spec, containers.DeclarativeContainer):
        return spec()
    if callable(spec) and not isinstance(spec, containers.Container):
        return spec()
    return spec


def get_state(app: Flask | None = None) -> RatchetState:
    """``app.extensions["ratchet"]``; ``LookupError`` naming the fix when Ratchet was not
    initialised on the app."""
    app = app if app is not None else current_app._get_current_object()  # type: ignore[attr-defined]
    state = app.extensions.get(EXTENSION_KEY)
    if not isinstance(state, RatchetState):
        raise LookupError(
            f"Ratchet is not initialised on Flask app {app.name!r}: call Ratchet(app) or "
            "ratchet.init_app(app)"
        )
    return state


def get_scheduler(app: Flask | None = None) -> JobScheduler:
    """The scheduler of ``app`` (default ``current_app``)."""
    return get_state(app).scheduler


def enqueue(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> UUID:
    """Enqueue ``fn(*args, **kwargs)`` from a view of ``current_app``. With Flask-SQLAlchemy
    (and the store in its database) the job joins ``db.session``'s transaction: it is committed
    by ``db.session.commit()`` and removed by a rollback."""
    return _submit(None, fn, args, kwargs)


def schedule(
    at_or_delay: datetime | timedelta | float, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
) -> UUID:
    """Like :func:`enqueue`, due at an aware datetime or after a delay."""
    return _submit(at_or_delay, fn, args, kwargs)


def session_transaction(app: Flask | None = None) -> Any:
    """The handle to enqueue with so that the job joins Flask-SQLAlchemy's ``db.session``, or
    None when the application does not use Flask-SQLAlchemy or the store is another database."""
    app = app if app is not None else current_app._get_current_object()  # type: ignore[attr-defined]
    db = _sqlalchemy_extension(app)
    if db is None:
        return None
    from ratchet_core.runtime.config import STORE_URL

    state = get_state(app)
    if state.container.settings().get(STORE_URL) != sqlalchemy_url(app):
        return None
    return db.session()


def _submit(
    when: datetime | timedelta | float | None,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> UUID:
    from ratchet_core.contrib._submit import submit_job

    state = get_state()
    return submit_job(state.container, when, fn, args, kwargs, transaction=session_transaction())


# ---------------------------------------------------------------- flask ratchet ...

_HIDDEN_COMMANDS = frozenset({"tck", "demo"})


def _lazy_group() -> type[click.Group]:
    # each `flask ratchet` command's module is imported when that command runs, as with
    # `ratchet` itself (a Flask app's import does not load the dashboard or the key tools)
    from ratchet_core.cli import LazyGroup

    return LazyGroup


def _flask_commands() -> dict[str, str]:
    from ratchet_core.cli import COMMAND_MODULES

    return {
        name: f"ratchet_core.cli.{module}"
        for name, module in COMMAND_MODULES.items()
        if name not in _HIDDEN_COMMANDS
    }


@click.group("ratchet", cls=_lazy_group(), lazy_modules=_flask_commands())
@click.pass_context
def ratchet_cli(ctx: click.Context) -> None:
    """Ratchet: worker, database schema, jobs and SPIs of this Flask app."""
    from ratchet_core.cli import CliState

    info = ctx.ensure_object(ScriptInfo)
    app = info.load_app()
    ctx.with_resource(app.app_context())
    # Ratchet's commands find their state on the root context; Flask's ScriptInfo stays
    # reachable from this group (click hands a context's obj down to its subcommands).
    container = get_state(app).container
    state = CliState(container=container, upgrade_command="flask ratchet db upgrade")
    ctx.find_root().obj = state
    ctx.obj = info
    # Ratchet's commands close the store they used (right for a process that exits); drop the
    # app's singletons afterwards so an app that lives on (tests, shells) opens fresh ones, and
    # the command's options (``worker -c 8``) with them.
    ctx.call_on_close(container.reset_singletons)
    ctx.call_on_close(state.restore)


__all__ = [
    "EXTENSION_KEY",
    "FlaskConfigSource",
    "Ratchet",
    "RatchetState",
    "enqueue",
    "get_scheduler",
    "get_state",
    "ratchet_cli",
    "schedule",
    "session_transaction",
    "sqlalchemy_url",
]
