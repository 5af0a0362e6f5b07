"""What the contracts record for the report during a pytest session."""

from __future__ import annotations

import pytest

ADVERTISED = pytest.StashKey[dict[str, set[str]]]()
SPI = pytest.StashKey[dict[str, tuple[str, str]]]()
"""Per subject: the store SPI version the store declares and the version the run certifies it
for, as text (``("1.0", "1.0")``)."""
"""Per subject (the ``tck_fixture`` parametrization id, "" when not parametrized): the
capabilities the store advertised."""


def subject_of(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    return str(callspec.id) if callspec is not None else ""
