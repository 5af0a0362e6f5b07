"""Flow control across the cluster: resource permits and rate limits.

A job declares them on its builder::

    scheduler.job(call_partner_api).args(order_id).resource("partner-api", permits=2).enqueue()
    scheduler.job(send_sms).args(number).rate_limit("sms", 20, per=timedelta(seconds=1)).enqueue()

They are stored with the job (``resource_key`` and the ``flow_control`` JSON column) and
enforced by the worker right before the job runs, through the store, so every worker of the
cluster sees the same counts:

* **permits**: at most ``permits`` jobs holding ``key`` run at once
  (``ResourcePermitStore.try_acquire_permit``, holder = the job id). The permit is released when
  the job finishes (success or failure) and expires after ``flow_control.permit_ttl`` if its
  worker dies (it is renewed while the job runs); a recovered job re-takes its own permit.
* **rate limits**: at most ``n`` jobs per ``per`` start with ``key``, a token bucket on the
  store's clock (``FlowControlStore.acquire_rate``; bursts of up to ``n``).

A job that is not admitted is given back without counting the attempt and becomes due again
later (``FlowControlStore.defer_claim``): after ``flow_control.retry_delay`` for a permit, after
the bucket's refill time plus a random spread of up to four periods for a rate limit, so waiting
jobs do not come back all at once and the poller never spins on them. Each refusal is counted by the
``gate_rejected`` metric (gate ``permit`` or ``rate``, reason = the key).
"""

from __future__ import annotations

import json
import logging
import random
import threading
from datetime import timedelta
from typing import Any
from uuid import UUID

import attrs

from ratchet_api.errors import InvalidJobError
from ratchet_api.spi.runtime import MetricsCollector, RatchetConfig, RatchetConfigKey
from ratchet_api.store.entities import MAX_KEY_LENGTH, JobEntity
from ratchet_api.store.protocols import FlowControlStore, JobStore, ResourcePermitStore
from ratchet_core.runtime.config import parse_duration, register_key

_log = logging.getLogger("ratchet.flow_control")

MAX_PERMITS = 1_000_000
RATE_SPREAD = 4.0
"""A job refused by a rate limit comes back within this many periods after the next token."""

PERMIT_TTL = register_key(
    RatchetConfigKey(
        "flow_control.permit_ttl",
        parse_duration,
        timedelta(seconds=30),
        "Lifetime of a resource permit; renewed every third of it while its job runs, so the "
        "permits of a worker that died are free again after at most this long.",
    )
)
RETRY_DELAY = register_key(
    RatchetConfigKey(
        "flow_control.retry_delay",
        parse_duration,
        timedelta(seconds=1),
        "How long a job that could not get its resource permit waits before it is claimed "
        "again (the attempt is not counted).",
    )
)


@attrs.frozen(kw_only=True)
class FlowSpec:
    """A job's flow-control options (what the ``flow_control`` column holds)."""

    permits: int | None = None
    rate_key: str | None = None
    rate_limit: int | None = None
    rate_per: float | None = None
    """Seconds."""

    @property
    def empty(self) -> bool:
        return self.permits is None and self.rate_key is None

    def encode(self) -> str | None:
        if self.empty:
            return None
        out: dict[str, Any] = {}
        if self.permits is not None:
            out["permits"] = self.permits
        if self.rate_key is not None:
            out["rate"] = {"key": self.rate_key, "limit": self.rate_limit, "per": self.rate_per}
        return json.dumps(out, sort_keys=True)

    @classmethod
    def decode(cls, text: str | None) -> FlowSpec:
        if not text:
            return cls()
        data = json.loads(text)
        rate = data.get("rate") or {}
        return cls(
            permits=data.get("permits"),
            rate_key=rate.get("key"),
            rate_limit=rate.get("limit"),
            rate_per=rate.get("per"),
        )


def _bad(option: str, message: str) -> InvalidJobError:
    return InvalidJobError(f"job option {option!r}: {message}")


def check_flow_key(option: str, key: Any) -> str:
    if not isinstance(key, str) or not key.strip():
        raise _bad(option, f"the key must be a non-empty string, got {key!r}")
    if len(key) > MAX_KEY_LENGTH:
        raise _bad(option, f"the key is {len(key)} characters, the limit is {MAX_KEY_LENGTH}")
    return key


def check_permits(permits: Any) -> int:
    if isinstance(permits, bool) or not isinstance(permits, int):
        raise _bad("resource", f"permits must be an integer, got {permits!r}")
    if not 1 <= permits <= MAX_PERMITS:
        raise _bad("resource", f"permits must be between 1 and {MAX_PERMITS}, got {permits}")
    return permits


def check_rate(limit: Any, per: Any) -> tuple[int, float]:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise _bad("rate_limit", f"the limit must be a positive integer, got {limit!r}")
    if isinstance(per, bool) or not isinstance(per, (int, float, timedelta)):
        raise _bad("rate_limit", f"per must be a timedelta or seconds, got {per!r}")
    seconds = per.total_seconds() if isinstance(per, timedelta) else float(per)
    if not seconds > 0:
        raise _bad("rate_limit", f"per must be positive, got {per!r}")
    return limit, seconds


class FlowControl:
    """The worker's admission gate (see the module docstring). Thread safe."""

    def __init__(self, store: JobStore, settings: RatchetConfig, metrics: MetricsCollector):
        self._store = store
        self._permits = store.capability(ResourcePermitStore)
        self._flow = store.capability(FlowControlStore)
        self._metrics = metrics
        self._ttl = settings.get(PERMIT_TTL)
        self._retry = settings.get(RETRY_DELAY)
        self._held: dict[UUID, tuple[str, int]] = {}
        self._lock = threading.Lock()
        # a renewal and a release of permits never interleave: a renewal that read a permit as
        # held and ran after its release would take it again for a finished job, for a TTL
        self._renewal = threading.Lock()
        self._closed = threading.Event()
        self._renewer: threading.Thread | None = None
        self._warned: set[str] = set()

    def admit(self, job: JobEntity) -> timedelta | None:
        """None when ``job`` may run now (its permit, if any, is held); otherwise how long to
        defer it. Never raises: a store error defers the job by ``flow_control.retry_delay``."""
        if job.flow_control is None:
            return None
        try:
            spec = FlowSpec.decode(job.flow_control)
        except (ValueError, TypeError, AttributeError):
            _log.warning("job %s has unreadable flow-control options; running it", job.id)
            return None
        try:
            return self._admit(job, spec)
        except Exception:  # noqa: BLE001 - retried later, never run unchecked
            _log.warning("flow control of job %s failed; deferring it", job.id, exc_info=True)
            self.release(job)
            return self._retry

    def _admit(self, job: JobEntity, spec: FlowSpec) -> timedelta | None:
        key = job.resource_key
        if key is not None and spec.permits is not None:
            if self._permits is None:
                self._warn_once("ResourcePermitStore", f"resource {key!r}")
            elif self._permits.try_acquire_permit(key, str(job.id), spec.permits, self._ttl):
                self._hold(job.id, key, spec.permits)
            else:
                self._metrics.gate_rejected("permit", key)
                return self._retry * random.uniform(1.0, 1.5)
        if spec.rate_key is not None and spec.rate_limit and spec.rate_per:
            if self._flow is None:
                self._warn_once("FlowControlStore", f"rate limit {spec.rate_key!r}")
                return None
            per = timedelta(seconds=spec.rate_per)
            wait = self._flow.acquire_rate(spec.rate_key, spec.rate_limit, per)
            if wait > timedelta(0):
                self.release(job)
                self._metrics.gate_rejected("rate", spec.rate_key)
                # spread the waiting jobs over a few periods: they do not all come back at
                # once, and a long queue costs a few refusals per token, not one per job
                return wait + per * random.uniform(0.0, RATE_SPREAD)
        return None

    def release(self, job: JobEntity) -> None:
        """Give back the permit ``job`` holds (no-op if none). Never raises (the permit then
        expires after ``flow_control.permit_ttl``)."""
        with self._lock:
            if job.id not in self._held:
                return  # most jobs: no permit, and no wait for a renewal under way
        with self._renewal:
            with self._lock:
                held = self._held.pop(job.id, None)
            if held is None or self._permits is None:
                return
            try:
                self._permits.release_permit(held[0], str(job.id))
            except Exception:  # noqa: BLE001 - it expires
                _log.warning("releasing permit %r of job %s failed", held[0], job.id, exc_info=True)

    def can_defer(self) -> bool:
        return self._flow is not None

    def defer(self, job: JobEntity, run_at: Any) -> bool:
        """Give the claim of a job that was not admitted back, due at ``run_at``, without
        counting its attempt (falls back to ``release_claim`` for a store without
        ``FlowControlStore``)."""
        if self._flow is not None:
            return self._flow.defer_claim(job.id, job.claim_seq, run_at)
        return self._store.release_claim(job.id, job.claim_seq)

    def close(self) -> None:
        self._closed.set()

    def _hold(self, job_id: UUID, key: str, permits: int) -> None:
        with self._lock:
            self._held[job_id] = (key, permits)
            if self._renewer is None:
                self._renewer = threading.Thread(
                    target=self._renew_loop, name="ratchet-permits", daemon=True
                )
                self._renewer.start()

    def _renew_loop(self) -> None:
        period = max(0.05, self._ttl.total_seconds() / 3)
        while not self._closed.wait(period):
            with self._lock:
                held = list(self._held.items())
            for job_id, (key, permits) in held:
                with self._renewal:
                    with self._lock:
                        if self._held.get(job_id) != (key, permits):
                            continue  # released meanwhile: renewing would take it again
                    try:
                        assert self._permits is not None
                        self._permits.try_acquire_permit(key, str(job_id), permits, self._ttl)
                    except Exception:  # noqa: BLE001 - retried next period
                        _log.warning("renewing permit %r of job %s failed", key, job_id)

    def _warn_once(self, capability: str, what: str) -> None:
        if capability not in self._warned:
            self._warned.add(capability)
            _log.warning(
                "the store lacks %s: %s is not enforced (jobs run unchecked)", capability, what
            )


__all__ = [
    "PERMIT_TTL",
    "RETRY_DELAY",
    "FlowControl",
    "FlowSpec",
    "check_flow_key",
    "check_permits",
    "check_rate",
]
