"""The examples of docs/workflows.md and docs/signals.md run as written, with a real worker on
SQLite: blocks whose first line is ``# file: NAME.py`` are written as importable modules, the
other ``python`` blocks run in order in one namespace."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
FILE = re.compile(r"\A# file: (\w+\.py)\n")


@pytest.mark.parametrize("page", ["workflows.md", "signals.md"])
def test_page_examples_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for variable in ("RATCHET_STORE_URL", "RATCHET_CONFIG_FILE", "RATCHET_ALTERNATIVES_MODULES"):
        monkeypatch.delenv(variable, raising=False)
    scripts = []
    for block in BLOCK.findall((DOCS / page).read_text()):
        named = FILE.match(block)
        if named:
            (tmp_path / named.group(1)).write_text(block)
            monkeypatch.delitem(sys.modules, named.group(1)[:-3], raising=False)
        else:
            scripts.append(block)
    assert scripts, f"{page} has no runnable example"
    namespace: dict[str, object] = {"__name__": f"docs_{page[:-3]}"}
    for index, script in enumerate(scripts):
        exec(compile(script, f"{page}#{index}", "exec"), namespace)
