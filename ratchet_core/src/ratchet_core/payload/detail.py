"""``JobDetailReader``: the readable (decrypted, masked) view of stored jobs.

Every read surface that shows payload values goes through it: ``scheduler.detail()``,
``ratchet jobs show`` and ``ratchet jobs list``. A value that cannot be opened does not fail the
view: its fields are None and ``unreadable`` says why (the integrity metric has been emitted by
the codec).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from ratchet_api.errors import EncryptionError, PayloadError
from ratchet_api.model import JobDetail, JobStatus, MaskingContext
from ratchet_api.store.entities import JobEntity
from ratchet_api.store.protocols import JobExtensionStore, JobStore
from ratchet_core.payload.codec import PayloadCodec
from ratchet_core.payload.masking import PayloadMasker


class JobDetailReader:
    """Builds ``JobDetail`` views. Thread safe."""

    def __init__(self, store: JobStore, codec: PayloadCodec, masker: PayloadMasker) -> None:
        self._store = store
        self._codec = codec
        self._masker = masker

    def _properties(self, job_ids: Sequence[UUID]) -> Mapping[UUID, dict[str, str]]:
        ext = self._store.capability(JobExtensionStore)
        if ext is None or not job_ids:
            return {}
        return ext.properties_for_jobs(job_ids)

    def detail(self, job: JobEntity) -> JobDetail:
        return self.details([job])[0]

    def details(self, jobs: Sequence[JobEntity]) -> list[JobDetail]:
        """Views of ``jobs`` (their properties fetched in one call)."""
        properties = self._properties([j.id for j in jobs])
        return [self._view(job, properties.get(job.id, {})) for job in jobs]

    def _view(self, job: JobEntity, properties: dict[str, str]) -> JobDetail:
        context = MaskingContext(job_id=job.id, job_properties=properties)
        problems: list[str] = []
        args: tuple[Any, ...] | None = None
        kwargs: dict[str, Any] | None = None
        try:
            invocation = self._codec.open_invocation(job)
        except (EncryptionError, PayloadError) as exc:
            problems.append(f"arguments: {exc}")
        else:
            masked_args, kwargs = self._masker.mask_arguments(invocation, context)
            args = tuple(masked_args)
        result: Any = None
        try:
            text = self._codec.open_result(job)
        except EncryptionError as exc:
            problems.append(f"result: {exc}")
        else:
            if text is not None:
                try:
                    result = json.loads(text)
                except ValueError:
                    result = text
                result = self._masker.mask(result, context)
        error: str | None = None
        if job.status is not JobStatus.SUCCEEDED or job.last_error is not None:
            try:
                error = self._codec.open_error(job)
            except EncryptionError as exc:
                problems.append(f"error: {exc}")
        return JobDetail(
            id=job.id,
            status=job.status,
            target=job.target,
            priority=job.priority,
            attempt=job.attempt,
            max_retries=job.max_retries,
            tags=job.tags,
            scheduled_at=job.scheduled_at,
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            args=args,
            kwargs=kwargs,
            result=result,
            error=error,
            properties=properties,
            encrypted=self._codec.is_encrypted(job),
            masked=self._masker.enabled,
            unreadable="; ".join(problems) or None,
        )


__all__ = ["JobDetailReader"]
