"""The ``JobContext`` a running job receives (a parameter annotated ``JobContext``)."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from ratchet_api.errors import RatchetError, UnsupportedCapabilityError
from ratchet_api.model import StateWriteResult
from ratchet_api.spi.payload import PayloadSerializer
from ratchet_api.spi.runtime import JobLogger
from ratchet_api.store.protocols import JobExtensionStore

_MAX_CAS_ROUNDS = 16


class RunningJobContext:
    """``JobContext`` of one execution attempt.

    ``logger`` is the job-scoped logger made by the ``JobLoggerFactory`` (the worker flushes and
    closes it after the attempt). ``get_state``/``set_state`` go through the store's
    ``JobExtensionStore`` capability and every write is fenced by this attempt's claim
    sequence: ``set_state`` returns False once the claim is superseded (the job was cancelled or
    recovered by another node), and the job should then stop. Without the capability both raise
    ``UnsupportedCapabilityError``. Valid only while the attempt runs; thread safe as far as the
    store and logger are.
    """

    __slots__ = (
        "_attempt",
        "_claim_seq",
        "_extension",
        "_job_id",
        "_logger",
        "_serializer",
        "_signal",
    )

    def __init__(
        self,
        *,
        job_id: UUID,
        attempt: int,
        claim_seq: int,
        logger: JobLogger,
        extension_store: JobExtensionStore | None = None,
        serializer: PayloadSerializer | None = None,
        signal_payload: str | None = None,
    ) -> None:
        self._signal = signal_payload
        self._job_id = job_id
        self._attempt = attempt
        self._claim_seq = claim_seq
        self._logger = logger
        self._extension = extension_store
        self._serializer = serializer

    @property
    def job_id(self) -> UUID:
        return self._job_id

    @property
    def attempt(self) -> int:
        return self._attempt

    @property
    def claim_seq(self) -> int:
        return self._claim_seq

    @property
    def logger(self) -> JobLogger:
        return self._logger

    def signal_payload(self, declared: Any = Any) -> Any:
        """The payload of the signal this job waited for, restored as ``declared`` (None when
        it received none: no ``await_signal``, or its timeout let it run without one)."""
        if self._signal is None:
            return None
        data = json.loads(self._signal)
        if self._serializer is None or declared is Any:
            return data
        return self._serializer.from_json_value(data, declared)

    def _store(self) -> JobExtensionStore:
        if self._extension is None:
            raise UnsupportedCapabilityError("JobExtensionStore", "JobContext state")
        return self._extension

    def get_state(self, namespace: str) -> Any:
        """The state stored under ``namespace`` as decoded JSON, or None."""
        current = self._store().get_state(self._job_id, namespace)
        return None if current is None else json.loads(current.json)

    def set_state(self, namespace: str, value: Any) -> bool:
        """Replace the state under ``namespace`` with ``value`` (converted to JSON through the
        payload serializer). Concurrent writers of the same namespace are resolved by re-reading
        the version; True when written, False when this attempt's claim was superseded."""
        store = self._store()
        data = self._serializer.to_json_value(value) if self._serializer is not None else value
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
        for _ in range(_MAX_CAS_ROUNDS):
            current = store.get_state(self._job_id, namespace)
            if current is None:
                outcome = store.init_state(
                    self._job_id, namespace, text, expected_claim_seq=self._claim_seq
                )
            else:
                outcome = store.update_state(
                    self._job_id,
                    namespace,
                    text,
                    current.version,
                    expected_claim_seq=self._claim_seq,
                )
            if outcome is StateWriteResult.UPDATED:
                return True
            if outcome is StateWriteResult.SUPERSEDED:
                return False
        raise RatchetError(
            f"job {self._job_id}: state {namespace!r} kept changing under "
            f"{_MAX_CAS_ROUNDS} write attempts"
        )

    def __repr__(self) -> str:
        return (
            f"RunningJobContext(job_id={self._job_id}, attempt={self._attempt}, "
            f"claim_seq={self._claim_seq})"
        )


__all__ = ["RunningJobContext"]
