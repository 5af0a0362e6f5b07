"""The pytest plugin (entry point ``pytest11: ratchet_tck``): report options and collection."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ratchet-tck", "Ratchet store TCK")
    group.addoption(
        "--ratchet-tck-report",
        metavar="DIR",
        default=None,
        help="write the Ratchet store compatibility report (JSON + Markdown) into DIR",
    )
    group.addoption(
        "--ratchet-tck-name",
        metavar="NAME",
        default=None,
        help="the store name shown in the compatibility report",
    )
