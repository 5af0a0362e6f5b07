"""Job targets of the encryption tests: each puts a caller-chosen marker into a surface (the
result, the versioned state, the error message) so a test can look for it in the raw store."""

from __future__ import annotations

from ratchet_api.scheduler import JobContext


def keep_secret(marker: str, account: dict[str, str], ctx: JobContext) -> dict[str, str]:
    """Writes ``<marker>-state`` to state ``progress`` and returns ``<marker>-result``."""
    ctx.set_state("progress", {"seen": f"{marker}-state"})
    assert ctx.get_state("progress") == {"seen": f"{marker}-state"}
    return {"token": f"{marker}-result", "user": account["user"]}


def fail_with_secret(marker: str) -> None:
    raise RuntimeError(f"upstream refused {marker}-error")


def echo_secret(marker: str) -> str:
    return f"{marker}-result"


def login(user: str, password: str, profile: dict[str, str], *, iban: str = "") -> dict[str, str]:
    """Returns a token and the profile (whose ``api_token`` must be masked in read views)."""
    return {"session_token": f"tok-{password}", "user": user, "iban": iban, **profile}


def fail_with_context(marker: str, ctx: JobContext) -> None:
    """Fails with the marker in its message; the worker logs the failure to the job's log."""
    ctx.logger.info("about to fail")
    raise RuntimeError(f"upstream refused {marker}-logged-error")
