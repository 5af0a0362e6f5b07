"""A job module with a ``@recurring`` function, imported by a worker through
``recurring.modules`` (tests remove its declaration afterwards)."""

from __future__ import annotations

from datetime import timedelta

from ratchet_core.features.recurring import recurring

DECORATED_ID = "tests-decorated-every-hour"


@recurring(every=timedelta(hours=1), id=DECORATED_ID, tags=["decorated"])
def hourly() -> None:
    """Does nothing; the test checks that it was declared."""
