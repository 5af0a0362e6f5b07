"""Key rotation and key status over a store's ``SealedValueStore`` and ``SealedArchiveStore``
capabilities.

:func:`rotate` re-encrypts, under the ``KeyProvider``'s current key, every stored value sealed
with another key: page by page in job id order, each value rewritten by compare and set (a value
that a worker changed meanwhile is left alone: the engine wrote it under the current key). It
needs both the old and the current key, so old values stay readable while it runs, and running
it again is harmless (values already under the current key are skipped); ``after`` resumes from
the last job id a previous run reported. Besides the jobs' own values (payload, result, last
error, signal payload, state) it rewrites the workflow conditions sealed under a child's id.
Once the scan of live jobs is complete it does the same over archived jobs (when the store has
``SealedArchiveStore``; ``after_archived`` resumes there), then the templates of recurring
definitions (through the ``RecurringJobStore``; a definition declared again meanwhile is left
alone). :func:`key_status` counts values per key id, archived ones under ``archived``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from uuid import UUID

import attrs

from ratchet_api.errors import EncryptionError, PayloadError, UnsupportedCapabilityError
from ratchet_api.model import EncryptionSurface
from ratchet_api.store.entities import StoredValue
from ratchet_api.store.protocols import (
    JobStore,
    RecurringJobStore,
    SealedArchiveStore,
    SealedValueStore,
)
from ratchet_core.features.recurring.template import decode_template
from ratchet_core.payload.codec import PayloadCodec
from ratchet_core.payload.envelope import key_id_of

SURFACES = {
    "payload": EncryptionSurface.PAYLOAD,
    "result": EncryptionSurface.RESULT,
    "last_error": EncryptionSurface.ERROR,
    "signal_payload": EncryptionSurface.SIGNAL_PAYLOAD,
    "state": EncryptionSurface.STATE,
    "condition": EncryptionSurface.PREDICATE,  # sealed under the id of the child it releases
}
RECURRING = "recurring"
"""The column name reports use for recurring templates (sealed under the definition's id)."""
ARCHIVED = "archived"
"""The column name :func:`key_status` counts every value of archived jobs under."""
PLAINTEXT = "(plaintext)"


def sealed_values(store: JobStore, feature: str) -> SealedValueStore:
    """The store as ``SealedValueStore``; ``UnsupportedCapabilityError`` naming ``feature``."""
    sealed = store.capability(SealedValueStore)
    if sealed is None:
        raise UnsupportedCapabilityError("SealedValueStore", feature)
    return sealed


@attrs.define
class ArchiveRotation:
    """The counts of :class:`RotationReport` for archived jobs."""

    scanned: int = 0
    rewritten: int = 0
    already_current: int = 0
    plaintext: int = 0
    changed_meanwhile: int = 0
    failures: list[tuple[UUID, str, str]] = attrs.field(factory=list)


@attrs.define
class RotationReport:
    """What :func:`rotate` did so far (also passed to the progress callback per batch)."""

    current_key_id: str
    batches: int = 0
    scanned: int = 0
    rewritten: int = 0
    already_current: int = 0
    plaintext: int = 0
    changed_meanwhile: int = 0
    failures: list[tuple[UUID, str, str]] = attrs.field(factory=list)
    last_job_id: UUID | None = None
    templates_rewritten: int = 0
    template_failures: list[tuple[str, str]] = attrs.field(factory=list)
    archive_covered: bool | None = None
    """True once archived jobs were scanned to the end, False when the store lacks
    ``SealedArchiveStore`` (archived values keep their keys), None while not reached."""
    archived: ArchiveRotation = attrs.field(factory=ArchiveRotation)
    """What the scan of archived jobs did (``SealedArchiveStore``)."""
    last_archived_job_id: UUID | None = None
    """The last archived job id done (resume with ``after_archived``)."""


def reseal(codec: PayloadCodec, value: StoredValue) -> str:
    """``value`` decrypted and encrypted again under the current key (same job, surface and
    namespace). Raises ``EncryptionError`` (integrity, unknown key) like any read."""
    surface = SURFACES[value.column]
    plaintext = codec.open(value.text, value.job_id, surface, value.namespace)
    return codec.seal(plaintext, value.job_id, surface, value.namespace)


def rotate(
    store: JobStore,
    codec: PayloadCodec,
    *,
    batch_size: int = 500,
    after: UUID | None = None,
    after_archived: UUID | None = None,
    max_batches: int | None = None,
    progress: Callable[[RotationReport], None] | None = None,
) -> RotationReport:
    """Re-encrypt every value not under the current key (see the module docstring). A value that
    cannot be opened (integrity violation, key no longer configured) is reported in
    ``failures`` (``archived.failures``) and left as it is. ``max_batches`` stops early (resume
    with ``after``, or with ``after_archived`` once the live jobs were done: the live scan is
    then skipped)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    sealed = sealed_values(store, "key rotation")
    report = RotationReport(current_key_id=codec.key_provider.current_key().key_id)
    if after_archived is None:
        done = _rotate_pages(
            sealed.scan_values,
            sealed.replace_values,
            after,
            codec=codec,
            report=report,
            counts=report,
            batch_size=batch_size,
            max_batches=max_batches,
            progress=progress,
            archived=False,
        )
        if not done:
            return report  # stopped early: the archive and templates wait for the next run
    archive = store.capability(SealedArchiveStore)
    if archive is None:
        report.archive_covered = False
    else:
        done = _rotate_pages(
            archive.scan_archived_values,
            archive.replace_archived_values,
            after_archived,
            codec=codec,
            report=report,
            counts=report.archived,
            batch_size=batch_size,
            max_batches=max_batches,
            progress=progress,
            archived=True,
        )
        if not done:
            return report
        report.archive_covered = True
    _rotate_templates(store, codec, report)
    return report


def _rotate_pages(
    scan: Callable[[UUID | None, int], list[StoredValue]],
    replace: Callable[[Sequence[tuple[StoredValue, str]]], int],
    cursor: UUID | None,
    *,
    codec: PayloadCodec,
    report: RotationReport,
    counts: RotationReport | ArchiveRotation,
    batch_size: int,
    max_batches: int | None,
    progress: Callable[[RotationReport], None] | None,
    archived: bool,
) -> bool:
    """Reseal one scan (live or archived jobs) page by page into ``counts``; False when
    ``max_batches`` stopped it before its end."""
    while max_batches is None or report.batches < max_batches:
        page = scan(cursor, batch_size)
        if not page:
            return True
        changes: list[tuple[StoredValue, str]] = []
        for value in page:
            counts.scanned += 1
            key_id = key_id_of(value.text)
            if key_id is None:
                counts.plaintext += 1
                continue
            if key_id == report.current_key_id:
                counts.already_current += 1
                continue
            try:
                changes.append((value, reseal(codec, value)))
            except EncryptionError as exc:
                counts.failures.append((value.job_id, value.column, str(exc)))
        written = replace(changes)
        counts.rewritten += written
        counts.changed_meanwhile += len(changes) - written
        cursor = page[-1].job_id
        report.batches += 1
        if archived:
            report.last_archived_job_id = cursor
        else:
            report.last_job_id = cursor
        if progress is not None:
            progress(report)
    return False


def _rotate_templates(store: JobStore, codec: PayloadCodec, report: RotationReport) -> None:
    """Reseal recurring templates not under the current key. ``save_recurring`` is not a
    compare and set, so the definition is read again right before it is saved and left alone
    when its template changed meanwhile (declared again: the declaration sealed it anew)."""
    recurring = store.capability(RecurringJobStore)
    if recurring is None:
        return
    for definition in recurring.list_recurring():
        try:
            template = decode_template(definition)
            key_id = key_id_of(template.invocation)
            if key_id is None or key_id == report.current_key_id:
                continue
            text = codec.open_template(template.invocation, definition.name)
            resealed = attrs.evolve(template, invocation=codec.seal_template(text, definition.name))
            current = recurring.find_recurring(definition.name)
            if current is None or current.payload != definition.payload:
                continue
            recurring.save_recurring(attrs.evolve(current, payload=resealed.encode()))
            report.templates_rewritten += 1
        except (EncryptionError, PayloadError) as exc:
            report.template_failures.append((definition.name, str(exc)))


def key_status(store: JobStore, *, batch_size: int = 1000) -> dict[str, Counter[str]]:
    """``{key id or "(plaintext)": Counter({column: count})}`` over every live job's values,
    every archived job's values (column ``archived``, when the store has
    ``SealedArchiveStore``: see :func:`covers_archive`) and every recurring template (column
    ``recurring``)."""
    sealed = sealed_values(store, "key status")
    counts: dict[str, Counter[str]] = {}
    recurring = store.capability(RecurringJobStore)
    for definition in recurring.list_recurring() if recurring is not None else ():
        try:
            invocation: str | None = decode_template(definition).invocation
        except PayloadError:
            invocation = None
        key = key_id_of(invocation) or PLAINTEXT
        counts.setdefault(key, Counter())[RECURRING] += 1
    _count_pages(sealed.scan_values, counts, batch_size, None)
    archive = store.capability(SealedArchiveStore)
    if archive is not None:
        _count_pages(archive.scan_archived_values, counts, batch_size, ARCHIVED)
    return counts


def covers_archive(store: JobStore) -> bool:
    """Whether :func:`rotate` and :func:`key_status` reach archived jobs on ``store`` (it has
    ``SealedArchiveStore``)."""
    return store.capability(SealedArchiveStore) is not None


def _count_pages(
    scan: Callable[[UUID | None, int], list[StoredValue]],
    counts: dict[str, Counter[str]],
    batch_size: int,
    column: str | None,
) -> None:
    cursor: UUID | None = None
    while True:
        page = scan(cursor, batch_size)
        if not page:
            return
        for value in page:
            key = key_id_of(value.text) or PLAINTEXT
            counts.setdefault(key, Counter())[column or value.column] += 1
        cursor = page[-1].job_id


__all__ = [
    "ARCHIVED",
    "PLAINTEXT",
    "RECURRING",
    "SURFACES",
    "ArchiveRotation",
    "RotationReport",
    "covers_archive",
    "key_status",
    "reseal",
    "rotate",
    "sealed_values",
]
