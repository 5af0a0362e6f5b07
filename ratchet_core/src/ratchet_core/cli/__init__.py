"""The ``ratchet`` command line.

The group ``main`` holds global options (``--app``, ``--set``); commands live in modules of this
package listed in :data:`COMMAND_MODULES` (command name -> module), each defining
``register(group: click.Group) -> None``. A command's module is imported when that command is
looked up (``ratchet worker`` never imports the dashboard, the key tools or rich's tables); a
module that does not exist is skipped, so commands can be added without editing this file.

Commands obtain the Ratchet container with :func:`get_container` (built: alternatives applied)
and the application object with :func:`get_app`.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from typing import Any

import attrs
import click

from ratchet_api.errors import RatchetError
from ratchet_core.runtime.container import (
    RatchetDynamicContainer,
    create_container,
    find_ratchet_container,
)

COMMAND_MODULES: Mapping[str, str] = {
    name: name
    for name in (
        "spi",
        "db",
        "worker",
        "jobs",
        "recurring",
        "batches",
        "enqueue",
        "demo",
        "tck",
        "signal",
        "keys",
        "dashboard",
        "health",
        "config",
        "metrics",
    )
}
"""Top-level command name -> module of this package registering it (``jobs`` also holds the
bulk commands of :mod:`ratchet_core.cli.bulk`)."""


class LazyGroup(click.Group):
    """A ``click.Group`` that imports a command's module (from ``lazy_modules``, command name ->
    importable module defining ``register(group)``) the first time the command is looked up,
    so that one command's start-up does not pay for every other command's imports."""

    def __init__(
        self, *args: Any, lazy_modules: Mapping[str, str] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_modules: dict[str, str] = dict(lazy_modules or {})

    def _load(self, name: str) -> None:
        module_name = self.lazy_modules.get(name)
        if module_name is None:
            return
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                del self.lazy_modules[name]
                return
            raise  # kept in lazy_modules: the next lookup reports the same error
        del self.lazy_modules[name]
        module.register(self)

    def list_commands(self, ctx: click.Context) -> list[str]:
        for name in list(self.lazy_modules):
            self._load(name)
        return super().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            self._load(cmd_name)
        return super().get_command(ctx, cmd_name)


@attrs.define
class CliState:
    """Per-invocation state kept in ``click.Context.obj``."""

    app_spec: str | None = None
    settings: dict[str, str] = attrs.field(factory=dict)
    _app: Any = None
    _container: RatchetDynamicContainer | None = None
    upgrade_command: str = "ratchet db upgrade"
    """How this command line creates the schema (named in "no schema yet" errors): the framework
    commands (``flask ratchet``, ``manage.py``) name their own."""
    worker_signals: Any = None
    """The ``ratchet_core.cli.worker.WorkerSignals`` a framework command installed before
    anything slow (``manage.py ratchet_worker``); None: ``worker`` installs its own."""
    route_loguru: bool = False
    """Whether ``worker`` hands loguru's records to the standard ``logging`` of the host
    framework (``ratchet_core.cli.worker.LoguruToLogging``) instead of loguru's stderr sink."""
    _applied: dict[str, str] = attrs.field(factory=dict)
    _inserted: list[Any] = attrs.field(factory=list)

    def app(self) -> Any:
        """The application object named by ``--app`` (None without it)."""
        if self.app_spec is None:
            return None
        if self._app is None:
            self._app = load_app(self.app_spec)
        return self._app

    def container(self) -> RatchetDynamicContainer:
        """The Ratchet container (of the application, or a plain one), built."""
        if self._container is None:
            app = self.app()
            container = find_ratchet_container(app) if app is not None else create_container()
            if self.settings:
                current = dict(container.overrides())
                current.update(self.settings)
                container.overrides.override(current)
                self._applied = dict(self.settings)
            container.ensure_built()
            self._container = container
        elif self.settings != self._applied:
            # A framework's container, built before the command's options were known
            # (``flask ratchet worker -c 8``): the options become its highest-precedence source.
            from ratchet_core.contrib import insert_config_source
            from ratchet_core.runtime.config import DictConfigSource

            pending = {k: v for k, v in self.settings.items() if self._applied.get(k) != v}
            source = DictConfigSource(pending)
            self._inserted.append(insert_config_source(self._container, source, position=0))
            self._applied = dict(self.settings)
        return self._container

    def restore(self) -> None:
        """Take the command's options out of a framework's container again (it outlives the
        command in tests and shells)."""
        from ratchet_core.contrib import remove_config_source

        while self._inserted and self._container is not None:
            remove_config_source(self._container, self._inserted.pop())
        self._applied = {}


def make_cwd_importable() -> None:
    """Put the current directory on ``sys.path`` right after the standard library (before
    installed packages), so that the project's own modules (``--app containers:...``, job
    modules such as ``myapp.jobs``) import without installing the project or setting
    ``PYTHONPATH``. Never ahead of the standard library: a file in the working directory named
    like a standard module (``tomllib.py``, ``json.py``) must not replace it."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(_after_standard_library(), cwd)


def _after_standard_library() -> int:
    """The index on ``sys.path`` just after the last standard-library entry (the stdlib
    directory, its zip and ``lib-dynload``)."""
    import sysconfig

    paths = sysconfig.get_paths()
    roots = {os.path.normpath(paths["stdlib"]), os.path.normpath(paths["platstdlib"])}
    index = 0
    for position, entry in enumerate(sys.path):
        normal = os.path.normpath(entry) if entry else entry
        in_stdlib = any(normal == root or normal.startswith(root + os.sep) for root in roots)
        stdlib_zip = normal.endswith(".zip") and normal.startswith(sys.base_prefix)
        if in_stdlib or stdlib_zip:
            index = position + 1
    return index


def import_object(spec: str, *, example: str, param_hint: str) -> Any:
    """The object named by ``module:qualname`` (dotted attributes allowed); a malformed spec,
    a module that cannot be imported or a missing attribute is a ``click.BadParameter``
    naming it."""
    module_name, sep, qualname = spec.partition(":")
    if not sep or not module_name or not qualname:
        raise click.BadParameter(
            f"expected module:attribute (for example {example}), got {spec!r}",
            param_hint=param_hint,
        )
    make_cwd_importable()
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(
            f"cannot import module {module_name!r} (from {os.getcwd()}): {exc}",
            param_hint=param_hint,
        ) from exc
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise click.BadParameter(
                f"module {module_name!r} has no attribute {qualname!r}", param_hint=param_hint
            ) from None
    return obj


def load_app(spec: str) -> Any:
    """Import ``module:attr``; a container class is instantiated and a callable attribute that
    is not a container is called with no arguments. The current directory is importable."""
    obj = import_object(spec, example="containers:create_container", param_hint="--app")
    from dependency_injector import containers

    if isinstance(obj, type) and issubclass(obj, containers.DeclarativeContainer):
        return obj()
    if callable(obj) and not isinstance(obj, containers.Container):
        return obj()
    return obj


def _state(ctx: click.Context) -> CliState:
    root = ctx.find_root()
    if not isinstance(root.obj, CliState):
        root.obj = CliState()
    return root.obj


def get_container(ctx: click.Context | None = None) -> RatchetDynamicContainer:
    """The built Ratchet container of this invocation. ``DeploymentError``s (ambiguous or
    non-conforming alternatives) become a clean CLI error."""
    ctx = ctx or click.get_current_context()
    try:
        return _state(ctx).container()
    except RatchetError as exc:
        raise click.ClickException(str(exc)) from exc


def get_app(ctx: click.Context | None = None) -> Any:
    """The object named by ``--app``, or None."""
    ctx = ctx or click.get_current_context()
    return _state(ctx).app()


def _parse_set(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[str, str]:
    result: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected key=value, got {item!r}", ctx, param)
        result[key.strip()] = value
    return result


@click.group(
    cls=LazyGroup,
    lazy_modules={name: f"{__name__}.{module}" for name, module in COMMAND_MODULES.items()},
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--app",
    "app_spec",
    envvar="RATCHET_APP",
    metavar="MODULE:ATTR",
    help="Application container (instance, class or zero-argument factory) that nests the "
    "Ratchet container, e.g. containers:create_container. Env: RATCHET_APP.",
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    callback=_parse_set,
    metavar="KEY=VALUE",
    help="Configuration override (highest precedence), e.g. --set store.url=sqlite:///x.db.",
)
@click.pass_context
def main(ctx: click.Context, app_spec: str | None, settings: dict[str, str]) -> None:
    """Ratchet: durable background jobs in your own database.

    The current directory is importable (as with ``python -m``): run commands from your
    project's root and ``--app`` and job modules are found there."""
    make_cwd_importable()
    ctx.obj = CliState(app_spec=app_spec, settings=settings)


__all__ = [
    "COMMAND_MODULES",
    "CliState",
    "LazyGroup",
    "get_app",
    "get_container",
    "import_object",
    "load_app",
    "main",
    "make_cwd_importable",
]
