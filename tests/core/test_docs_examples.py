"""Every ```python block of the SPI pages, of docs/overriding-an-spi.md and of docs/worker.md
runs as written.

(Blocks fenced as ```py are fragments that need an application around them; they are only
compiled.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = [*sorted((DOCS / "spi").glob("*.md")), DOCS / "overriding-an-spi.md", DOCS / "worker.md"]
BLOCK = re.compile(r"^```(python|py)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks() -> list[tuple[str, str, str]]:
    found = []
    for page in PAGES:
        for index, match in enumerate(BLOCK.finditer(page.read_text())):
            found.append((f"{page.relative_to(DOCS)}#{index}", match.group(1), match.group(2)))
    return found


BLOCKS = blocks()


def test_every_spi_page_has_an_example() -> None:
    pages_with_blocks = {name.split("#")[0] for name, _, _ in BLOCKS}
    for page in (DOCS / "spi").glob("*.md"):
        if page.name in ("README.md", "lambda-analyzer.md"):
            continue
        assert f"spi/{page.name}" in pages_with_blocks, page.name


@pytest.mark.parametrize(("name", "kind", "code"), BLOCKS, ids=[b[0] for b in BLOCKS])
def test_documentation_example_runs(
    name: str, kind: str, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled = compile(code, name, "exec")
    if kind == "py":
        return
    monkeypatch.chdir(tmp_path)
    for variable in ("RATCHET_STORE_URL", "RATCHET_CONFIG_FILE", "RATCHET_ALTERNATIVES_MODULES"):
        monkeypatch.delenv(variable, raising=False)
    exec(compiled, {"__name__": f"docs_example_{abs(hash(name))}"})
