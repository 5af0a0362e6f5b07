"""Signals: delivering a payload to a job that waits for it, and timing out those that wait
too long.

The payload of an encrypted job (its stored payload is an envelope) is sealed under
``SIGNAL_PAYLOAD`` and the job's id before it is stored, and opened when the job runs.

A job built with ``.await_signal(key, timeout=..., on_timeout=...)`` waits in AWAITING_SIGNAL
(a workflow step starts waiting once its parent released it). ``SignalService.signal`` moves it
to PENDING with the payload through the store's compare-and-set (``deliver_signal_by_id``): of
any number of concurrent signals, and of a signal racing the timeout sweep
(``expire_signal``, the same compare-and-set from the other side), exactly one wins; every
other caller is told why it lost (``SignalOutcome``).

The timeout sweep runs in the worker's maintenance under the startup lease (one node at a
time): each job whose deadline passed is expired as its ``on_timeout`` says (``FAIL``: dead
letter with a ``SignalTimeout`` error, ``CANCEL``, ``RUN``: due now without a payload).
"""

from __future__ import annotations

import json
import logging
from uuid import UUID

from ratchet_api.errors import InvalidJobError, UnsupportedCapabilityError
from ratchet_api.model import JobStatus
from ratchet_api.spi import MetricsCollector, PayloadSerializer, SignalOutcome
from ratchet_api.store.entities import JobEntity
from ratchet_api.store.protocols import JobStore, SignalStore
from ratchet_api.workflow import SignalDecision, SignalTimeout
from ratchet_core.features.workflow.meta import decode_meta
from ratchet_core.payload.codec import PayloadCodec
from ratchet_core.payload.forms import dumps_compact

_log = logging.getLogger("ratchet.signals")

TIMEOUT_PREFIX = "SignalTimeout: "
"""Start of the ``last_error`` a timed-out job gets (how a late signal is told TIMED_OUT)."""

MAX_JOBS_PER_KEY = 1000
SWEEP_BATCH = 500

_EXPIRY_STATUS = {
    SignalTimeout.FAIL: JobStatus.FAILED,
    SignalTimeout.CANCEL: JobStatus.CANCELLED,
    SignalTimeout.RUN: JobStatus.PENDING,
}


class SignalService:
    """Delivery and timeouts of signals. Thread safe."""

    def __init__(
        self,
        store: JobStore,
        serializer: PayloadSerializer,
        metrics: MetricsCollector,
        codec: PayloadCodec | None = None,
    ) -> None:
        self._store = store
        self._signals = store.capability(SignalStore)
        self._serializer = serializer
        self._metrics = metrics
        # an encrypted job's payload is sealed under SIGNAL_PAYLOAD and its id
        self._codec = codec if codec is not None else PayloadCodec.disabled()

    def _require(self) -> SignalStore:
        if self._signals is None:
            raise UnsupportedCapabilityError("SignalStore", "signals")
        return self._signals

    def encode_payload(self, payload: object) -> str:
        try:
            return dumps_compact(self._serializer.to_json_value(payload))
        except (TypeError, ValueError) as exc:
            raise InvalidJobError(f"signal payload cannot be stored as JSON: {exc}") from exc

    def signal(self, target: UUID | str, payload: object = None) -> SignalDecision:
        """Deliver ``payload`` to the job with id ``target`` (a UUID) or to every job waiting
        for the signal key ``target`` (a str)."""
        signals = self._require()
        if isinstance(target, UUID):
            job = self._store.find_by_id(target)
            jobs = [] if job is None else [job]
        elif isinstance(target, str) and target:
            jobs = signals.find_jobs_by_signal_key(target, MAX_JOBS_PER_KEY)
        else:
            raise InvalidJobError(f"signal target must be a job id (UUID) or a key, got {target!r}")
        text = self.encode_payload(payload)
        outcomes: dict[UUID, SignalOutcome] = {}
        for job in jobs:
            outcome = self._deliver(signals, job, text)
            outcomes[job.id] = outcome
            key = job.signal_key or str(job.id)
            self._metrics.signal_delivered(job.id, job.job_type, key, outcome)
        if not outcomes:
            overall = SignalOutcome.NOT_FOUND
        elif SignalOutcome.DELIVERED in outcomes.values():
            overall = SignalOutcome.DELIVERED
        else:
            overall = next(iter(outcomes.values()))
        return SignalDecision(target=str(target), outcome=overall, jobs=outcomes)

    def _deliver(self, signals: SignalStore, job: JobEntity, text: str) -> SignalOutcome:
        if job.status is JobStatus.AWAITING_SIGNAL and signals.deliver_signal_by_id(
            job.id, self._codec.seal_signal_payload(job, text)
        ):
            return SignalOutcome.DELIVERED
        current = self._store.find_by_id(job.id) if job.status is JobStatus.AWAITING_SIGNAL else job
        return classify(current)

    # ------------------------------------------------------------ timeouts

    def expire_timed_out(self, limit: int = SWEEP_BATCH) -> list[JobEntity]:
        """Expire every job whose signal deadline passed; the expired jobs that finished
        (FAILED or CANCELLED), whose dependents must then be settled."""
        signals = self._signals
        if signals is None:
            return []
        finished: list[JobEntity] = []
        for job in signals.find_timed_out_signal_jobs(limit):
            meta = decode_meta(job.workflow)
            status = _EXPIRY_STATUS[meta.on_timeout]
            waited = (
                f" within {meta.signal_timeout.total_seconds():g}s" if meta.signal_timeout else ""
            )
            reason = f"{TIMEOUT_PREFIX}no signal {job.signal_key!r} arrived{waited}"
            if signals.expire_signal(job.id, reason, status):
                self._metrics.signal_timed_out(job.id, job.job_type, job.signal_key or "")
                _log.info("job %s: %s (%s)", job.id, reason, meta.on_timeout.value)
                if status is not JobStatus.PENDING:
                    finished.append(job)
        return finished


def classify(job: JobEntity | None) -> SignalOutcome:
    """Why a job did not take a signal (it was not AWAITING_SIGNAL when asked)."""
    if job is None:
        return SignalOutcome.NOT_FOUND
    if job.signal_payload is not None:
        return SignalOutcome.ALREADY_DELIVERED
    if job.signal_key is not None and (job.last_error or "").startswith(TIMEOUT_PREFIX):
        return SignalOutcome.TIMED_OUT
    if job.status is JobStatus.AWAITING_SIGNAL:
        return SignalOutcome.NOT_WAITING  # raced to a state that changed back: rare
    return SignalOutcome.NOT_WAITING


def decode_signal_payload(text: str | None) -> object:
    """The stored payload as JSON data (None for none)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


__all__ = [
    "TIMEOUT_PREFIX",
    "SignalService",
    "classify",
    "decode_signal_payload",
]
