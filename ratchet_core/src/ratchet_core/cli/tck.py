"""``ratchet tck ...``: the store compatibility kit's command (``ratchet-tck``) under the
``ratchet`` command, when the ``ratchet-tck`` distribution is installed."""

from __future__ import annotations

import importlib

import click


@click.command(
    "tck",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def tck_command(ctx: click.Context, args: tuple[str, ...]) -> None:
    """Certify a store: the same as `ratchet-tck ARGS` (e.g. `ratchet tck report --fixture
    mymodule:make_fixture --out build/tck`). Needs `pip install ratchet-tck`."""
    try:
        tck_cli = importlib.import_module("ratchet_tck.cli")
    except ImportError as exc:
        raise click.ClickException(
            f"`ratchet tck` needs the ratchet-tck distribution ({exc}); "
            "install it with `pip install ratchet-tck`"
        ) from exc
    ctx.exit(tck_cli.main(list(args)))


def register(group: click.Group) -> None:
    group.add_command(tck_command)


__all__ = ["register", "tck_command"]
