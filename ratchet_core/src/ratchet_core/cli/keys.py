"""``ratchet keys generate|rotate|status``: encryption keys and the values sealed with them."""

from __future__ import annotations

import base64
import json
import os

import click
from rich.table import Table

from ratchet_api.errors import EncryptionError
from ratchet_api.store.protocols import JobStore
from ratchet_core.cli import get_container
from ratchet_core.cli.db import apply_url, console, parse_job_id, ratchet_errors, url_option
from ratchet_core.payload.codec import PayloadCodec
from ratchet_core.payload.encryption import KEY_BYTES, KEY_ID_PATTERN
from ratchet_core.payload.keys import LocalKeyWrapper
from ratchet_core.payload.rotation import (
    ARCHIVED,
    RECURRING,
    SURFACES,
    RotationReport,
    covers_archive,
    key_status,
    rotate,
)

NOT_COVERED = (
    "archived jobs: not covered: the store lacks SealedArchiveStore (their values keep the "
    "keys they were sealed with, which must stay configured until retention purges them)"
)


@click.group("keys")
def keys_group() -> None:
    """Payload encryption keys: generate one, rotate stored values to the current key, and
    count stored values per key id (see docs/security.md)."""


@keys_group.command("generate")
@click.option("--id", "key_id", required=True, help="Id of the new key (letters, digits, . _ -).")
@click.option(
    "--wrapping-key-env",
    metavar="NAME",
    default=None,
    help="Print the key wrapped by the local wrapping key in this environment variable "
    "(base64 of 32 bytes), for UnwrappingKeyProvider + LocalKeyWrapper.",
)
def generate_key(key_id: str, wrapping_key_env: str | None) -> None:
    """Print a new random 256-bit key as <id>:<base64>, ready for RATCHET_ENCRYPTION_KEYS (or
    wrapped, with --wrapping-key-env)."""
    if not KEY_ID_PATTERN.match(key_id):
        raise click.BadParameter(
            f"{key_id!r}: use 1 to 64 letters, digits, '.', '_' or '-'", param_hint="--id"
        )
    data_key = os.urandom(KEY_BYTES)
    if wrapping_key_env is not None:
        encoded = os.environ.get(wrapping_key_env)
        if not encoded:
            raise click.BadParameter(
                f"environment variable {wrapping_key_env} is not set",
                param_hint="--wrapping-key-env",
            )
        try:
            wrapper = LocalKeyWrapper(base64.b64decode(encoded, validate=True))
        except (ValueError, EncryptionError) as exc:
            raise click.BadParameter(
                f"{wrapping_key_env}: {exc}", param_hint="--wrapping-key-env"
            ) from None
        data_key = wrapper.wrap(key_id, data_key)
    material = base64.b64encode(data_key).decode("ascii")
    click.echo(f"{key_id}:{material}")
    click.echo(
        f"add it to encryption.keys and set encryption.current_key_id={key_id} on every node, "
        "then run `ratchet keys rotate`",
        err=True,
    )


def _codec(store_url: str | None) -> tuple[PayloadCodec, JobStore]:
    apply_url(store_url)
    with ratchet_errors():
        container = get_container()
        codec: PayloadCodec = container.payload_codec()
        store: JobStore = container.job_store()
    return codec, store


@keys_group.command("rotate")
@click.option("--batch-size", default=500, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--after", default=None, metavar="JOB_ID", help="Resume after this job id.")
@click.option(
    "--after-archived",
    default=None,
    metavar="JOB_ID",
    help="Resume the archived jobs after this archived job id (the live jobs are done).",
)
@click.option(
    "--max-batches", default=None, type=click.IntRange(1), help="Stop after this many batches."
)
@url_option
def rotate_keys(
    batch_size: int,
    after: str | None,
    after_archived: str | None,
    max_batches: int | None,
    store_url: str | None,
) -> None:
    """Re-encrypt every stored value not under the current key (payloads, results, errors,
    signal payloads, state, workflow conditions of live and archived jobs, recurring
    templates), in batches, by compare and set: safe while workers run, and resumable (--after
    or --after-archived the last job id printed, or simply run again)."""
    codec, store = _codec(store_url)
    start = parse_job_id(after) if after else None
    start_archived = parse_job_id(after_archived) if after_archived else None

    def progress(report: RotationReport) -> None:
        if report.last_archived_job_id is not None:
            click.echo(
                f"batch {report.batches}: up to archived job {report.last_archived_job_id}: "
                f"{report.archived.rewritten} rewritten, "
                f"{report.archived.already_current} already current"
            )
            return
        click.echo(
            f"batch {report.batches}: up to job {report.last_job_id}: {report.rewritten} "
            f"rewritten, {report.already_current} already current"
        )

    with ratchet_errors():
        report = rotate(
            store,
            codec,
            batch_size=batch_size,
            after=start,
            after_archived=start_archived,
            max_batches=max_batches,
            progress=progress,
        )
    click.echo(
        f"rotated to key {report.current_key_id}: {report.scanned} values scanned, "
        f"{report.rewritten} re-encrypted, {report.already_current} already current, "
        f"{report.plaintext} plaintext, {report.changed_meanwhile} changed meanwhile, "
        f"{len(report.failures)} failed; {report.templates_rewritten} recurring templates "
        f"re-encrypted"
    )
    archived = report.archived
    if report.archive_covered is False:
        click.echo(NOT_COVERED)
    elif report.archive_covered is not None or report.last_archived_job_id is not None:
        click.echo(
            f"archived jobs: {archived.scanned} values scanned, {archived.rewritten} "
            f"re-encrypted, {archived.already_current} already current, {archived.plaintext} "
            f"plaintext, {archived.changed_meanwhile} changed meanwhile, "
            f"{len(archived.failures)} failed"
        )
    else:
        click.echo("archived jobs: not reached yet (run again to cover them)")
    if report.last_job_id is not None:
        click.echo(f"last job id: {report.last_job_id}")
    if report.last_archived_job_id is not None:
        click.echo(f"last archived job id: {report.last_archived_job_id}")
    for job_id, column, error in report.failures[:20]:
        click.echo(f"  failed: job {job_id} {column}: {error}", err=True)
    for job_id, column, error in archived.failures[:20]:
        click.echo(f"  failed: archived job {job_id} {column}: {error}", err=True)
    for name, error in report.template_failures[:20]:
        click.echo(f"  failed: recurring template {name!r}: {error}", err=True)
    failed = len(report.failures) + len(archived.failures) + len(report.template_failures)
    if failed:
        raise click.ClickException(
            f"{failed} values could not be re-encrypted (listed above); they keep "
            "their old key, which must stay configured"
        )


@keys_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@url_option
def keys_status(as_json: bool, store_url: str | None) -> None:
    """Count stored values per key id (and plaintext ones), per column; every value of
    archived jobs is counted under `archived`."""
    codec, store = _codec(store_url)
    try:
        current: str | None = codec.key_provider.current_key().key_id
    except EncryptionError:
        current = None
    with ratchet_errors():
        counts = key_status(store)
        archive_covered = covers_archive(store)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "current_key_id": current,
                    "archive_covered": archive_covered,
                    "keys": {k: dict(v) for k, v in sorted(counts.items())},
                },
                indent=2,
            )
        )
        return
    table = Table(title=f"stored values per key (current: {current or 'none'})")
    table.add_column("key id")
    columns = [*SURFACES, RECURRING, ARCHIVED]
    for column in columns:
        table.add_column(column, justify="right")
    table.add_column("total", justify="right")
    for key_id, per_column in sorted(counts.items()):
        name = f"{key_id} (current)" if key_id == current else key_id
        table.add_row(
            name,
            *(str(per_column.get(c, 0)) for c in columns),
            str(sum(per_column.values())),
        )
    console().print(table)
    if not archive_covered:
        click.echo(NOT_COVERED.replace("not covered", "not counted"))


def register(group: click.Group) -> None:
    group.add_command(keys_group)
