"""Health of a Ratchet deployment, for probes: the store answers, its schema is current, and
enough worker nodes heartbeat; the ``spi`` check names the store SPI version and, for a store
of an older minor version, the features disabled. Used by ``ratchet health`` (exit code) and
the dashboard's ``/healthz`` (HTTP status)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import attrs

from ratchet_api.errors import RatchetError
from ratchet_api.store.protocols import JobStore
from ratchet_core.runtime.store_compat import spi_status
from ratchet_core.runtime.stores import require_schema


@attrs.frozen(kw_only=True)
class HealthCheck:
    """One check: its name, whether it passed, and what was seen."""

    name: str
    ok: bool
    detail: str


@attrs.frozen(kw_only=True)
class HealthReport:
    checks: tuple[HealthCheck, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": "ok" if self.ok else "unhealthy",
            "checks": {c.name: {"ok": c.ok, "detail": c.detail} for c in self.checks},
        }


def check_health(store: JobStore, *, node_timeout: timedelta, min_nodes: int = 0) -> HealthReport:
    """Run the checks (store, spi, schema, nodes); never raises for a failing store (the check
    says why)."""
    try:
        now = store.server_now()
    except Exception as exc:  # noqa: BLE001 - any failure to answer is the finding
        return HealthReport(
            checks=(HealthCheck(name="store", ok=False, detail=f"{type(exc).__name__}: {exc}"),)
        )
    checks = [HealthCheck(name="store", ok=True, detail=f"answers (clock {now.isoformat()})")]
    try:  # informs (an older minor version runs, adapted); fails only for an unusable version
        checks.append(HealthCheck(name="spi", ok=True, detail=spi_status(store).summary()))
    except RatchetError as exc:
        checks.append(HealthCheck(name="spi", ok=False, detail=str(exc)))
    try:
        require_schema(store)
        checks.append(HealthCheck(name="schema", ok=True, detail="current"))
    except RatchetError as exc:
        checks.append(HealthCheck(name="schema", ok=False, detail=str(exc)))
        return HealthReport(checks=tuple(checks))
    try:
        nodes = store.find_all_nodes()
    except Exception as exc:  # noqa: BLE001 - reported
        checks.append(HealthCheck(name="nodes", ok=False, detail=f"{type(exc).__name__}: {exc}"))
        return HealthReport(checks=tuple(checks))
    alive = [n for n in nodes if now - n.last_heartbeat <= node_timeout]
    checks.append(
        HealthCheck(
            name="nodes",
            ok=len(alive) >= min_nodes,
            detail=f"{len(alive)} alive, {len(nodes) - len(alive)} silent "
            f"(at least {min_nodes} required; silent = no heartbeat for "
            f"{node_timeout.total_seconds():g}s)",
        )
    )
    return HealthReport(checks=tuple(checks))


__all__ = ["HealthCheck", "HealthReport", "check_health"]
