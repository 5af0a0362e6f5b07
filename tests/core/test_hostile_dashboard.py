"""The dashboard renders stored data as text (issue 26): its scripts build the page from DOM
nodes and text nodes only, so an argument, error or target holding HTML or script is shown as
written. A script that parses strings as HTML would fail this."""

from __future__ import annotations

import re
from pathlib import Path

import ratchet_core.dashboard

STATIC = Path(ratchet_core.dashboard.__file__).resolve().parent / "static"
HTML_SINKS = re.compile(
    r"\.(innerHTML|outerHTML)\s*=|insertAdjacentHTML|document\.write|createContextualFragment"
    r"|DOMParser|\beval\s*\(|new\s+Function\s*\("
)


def test_the_dashboard_scripts_never_parse_strings_as_html() -> None:
    scripts = sorted(STATIC.glob("*.js"))
    assert scripts, "no dashboard scripts found"
    for script in scripts:
        found = HTML_SINKS.findall(script.read_text())
        assert not found, f"{script.name} parses strings as HTML or code: {found}"
