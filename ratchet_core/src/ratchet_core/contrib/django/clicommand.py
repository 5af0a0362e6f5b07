"""Ratchet's ``click`` commands as Django management commands.

``manage.py ratchet_worker``, ``ratchet_jobs``, ``ratchet_enqueue`` and ``ratchet_db`` are the
``ratchet worker``, ``ratchet jobs``, ``ratchet enqueue`` and ``ratchet db`` commands: their
options are generated from the click definitions (one definition, so the two command lines
cannot drift apart), parsed by Django's ``argparse`` parser (``--help``, ``call_command``) and
handed back to click, which validates and runs them on the project's container.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from typing import Any, ClassVar

import click
from django.core.management.base import BaseCommand, CommandError, CommandParser

_SUBCOMMAND = "ratchet_subcommand"
_PROJECT_OWNED = frozenset({"store_url"})
"""Options the project's settings own: ``--url`` (the store is ``RATCHET``/``DATABASES``'s)."""


def _dest(param: click.Parameter) -> str:
    return f"ratchet_{param.name}"


def _help(option: click.Option) -> str:
    text = (option.help or "").replace("\b\n", "").strip()
    if isinstance(option.type, click.Choice):
        text = f"{text} One of: {', '.join(map(str, option.type.choices))}.".strip()
    if option.show_default and option.default not in (None, False, ()):
        text = f"{text} (default: {option.default})".strip()
    return text.replace("%", "%%")


def add_click_params(parser: argparse.ArgumentParser, command: click.Command) -> None:
    """Add ``command``'s options and arguments to ``parser`` (a group's subcommands become
    sub-parsers). Values are kept as given: click converts and validates them."""
    if isinstance(command, click.Group):
        subparsers = parser.add_subparsers(dest=_SUBCOMMAND, metavar="COMMAND", required=True)
        for name, sub in command.commands.items():
            if sub.hidden:
                continue
            subparser = subparsers.add_parser(
                name, help=sub.get_short_help_str(limit=80), description=sub.help
            )
            add_click_params(subparser, sub)
        return
    for param in command.params:
        if param.name in _PROJECT_OWNED:
            continue
        if isinstance(param, click.Argument):
            nargs: Any = "*" if param.nargs == -1 else (None if param.required else "?")
            parser.add_argument(_dest(param), nargs=nargs, metavar=param.human_readable_name)
        elif isinstance(param, click.Option) and not param.hidden:
            _add_option(parser, param)


def _add_option(parser: argparse.ArgumentParser, option: click.Option) -> None:
    dest = _dest(option)
    if option.is_flag and option.secondary_opts:
        parser.add_argument(
            *option.opts, dest=dest, action="store_const", const=True, help=_help(option)
        )
        parser.add_argument(*option.secondary_opts, dest=dest, action="store_const", const=False)
        parser.set_defaults(**{dest: None})
    elif option.is_flag:
        parser.add_argument(
            *option.opts, dest=dest, action="store_const", const=True, help=_help(option)
        )
    else:
        metavar = option.metavar or option.opts[0].lstrip("-").replace("-", "_").upper()
        parser.add_argument(
            *option.opts,
            dest=dest,
            action="append" if option.multiple else "store",
            metavar=metavar,
            help=_help(option),
        )


def click_argv(command: click.Command, options: dict[str, Any]) -> list[str]:
    """The click command line that ``options`` (parsed by :func:`add_click_params`) stand for."""
    if isinstance(command, click.Group):
        name = options[_SUBCOMMAND]
        return [name, *click_argv(command.commands[name], options)]
    argv: list[str] = []
    positional: list[str] = []
    for param in command.params:
        value = options.get(_dest(param))
        if value is None:
            continue
        if isinstance(param, click.Argument):
            positional.extend(str(v) for v in (value if isinstance(value, list) else [value]))
        elif isinstance(param, click.Option):
            if param.is_flag:
                if value:
                    argv.append(param.opts[0])
                elif param.secondary_opts:
                    argv.append(param.secondary_opts[0])
            elif param.multiple:
                for item in value:
                    argv += [param.opts[0], str(item)]
            else:
                argv += [param.opts[0], str(value)]
    return [*argv, "--", *positional] if positional else argv


@contextlib.contextmanager
def _streams(stdout: Any, stderr: Any) -> Iterator[None]:
    out = getattr(stdout, "_out", stdout)
    err = getattr(stderr, "_out", stderr)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield


class ClickCommand(BaseCommand):
    """A management command that runs a Ratchet click command on the project's container.

    Subclasses set :attr:`click_command` and may override :meth:`settings_from` to turn their
    own (Django-only) options into configuration values for this run."""

    click_command: ClassVar[click.Command]

    @property
    def help(self) -> str:  # type: ignore[override]
        text = (self.click_command.help or "").split("\b")[0]
        return " ".join(text.split())

    def add_arguments(self, parser: CommandParser) -> None:
        add_click_params(parser, self.click_command)

    def settings_from(self, options: dict[str, Any]) -> dict[str, str]:
        """Configuration values for this run from the command's own options (none here)."""
        return {}

    def cli_state_options(self) -> dict[str, Any]:
        """Extra ``CliState`` fields for this run (none here)."""
        return {}

    def handle(self, *args: Any, **options: Any) -> None:
        from ratchet_api.errors import RatchetError
        from ratchet_core.cli import CliState
        from ratchet_core.contrib.django import get_container

        try:
            container = get_container()
        except RatchetError as exc:
            raise CommandError(str(exc)) from exc
        state = CliState(
            container=container,
            upgrade_command="manage.py ratchet_migrate",
            **self.cli_state_options(),
        )
        state.settings.update(self.settings_from(options))
        argv = click_argv(self.click_command, options)
        prog = f"{_prog_name()} {self._command_name()}"
        try:
            with _streams(self.stdout, self.stderr):
                code = self.click_command.main(
                    args=argv, prog_name=prog, standalone_mode=False, obj=state
                )
        except click.ClickException as exc:
            raise CommandError(exc.format_message(), returncode=exc.exit_code) from exc
        except click.Abort:
            raise CommandError("aborted") from None
        finally:
            state.restore()
            # A project that lives on (call_command, tests, shells) opens fresh singletons:
            # close the store this command used (closing twice is harmless), then drop them.
            with contextlib.suppress(Exception):
                container.job_store().close()
            container.reset_singletons()
        if isinstance(code, int) and code != 0:
            raise CommandError(f"{prog} exited with status {code}", returncode=code)

    def _command_name(self) -> str:
        return type(self).__module__.rsplit(".", 1)[-1]


def _prog_name() -> str:
    import os

    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return name if name.endswith(".py") else "manage.py"


__all__ = ["ClickCommand", "add_click_params", "click_argv"]
