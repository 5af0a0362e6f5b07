"""The job of ``bench_outcomes.py`` on Ratchet's side (no third-party import): it fails for
``percent`` out of every hundred ``n``."""

from __future__ import annotations


def flaky(n: int, percent: int) -> None:
    """Does nothing, or raises for ``percent`` % of the ``n`` values."""
    if n % 100 < percent:
        raise RuntimeError(f"job {n} fails on purpose")
