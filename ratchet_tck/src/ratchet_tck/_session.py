"""What the contracts record for the report during a pytest session."""

from __future__ import annotations

import pytest

ADVERTISED = pytest.StashKey[dict[str, set[str]]]()
"""Per subject (the ``tck_fixture`` parametrization id, "" when not parametrized): the
capabilities the store advertised."""


def subject_of(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    return str(callspec.id) if callspec is not None else ""
