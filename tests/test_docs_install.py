"""Every "from a checkout" install line of the integration docs works: each runs as written in
the repository's root, in a fresh venv (pip resolves the third-party dependencies from the
configured index), and the modules the line promises then import.

The published form printed beside each line (``pip install "ratchet-core[flask,sql]"``) cannot
be run before the distributions are published; the test checks it names the same extras.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("flask.md", "django.md", "fastapi.md", "tck.md")
CHECKOUT_MARK = "# from a checkout"
PUBLISHED_MARK = "# published form"
# What each distribution or extra of a checkout line must make importable.
IMPORTS = {
    "ratchet_api": ["ratchet_api"],
    "ratchet_store_sql": ["ratchet_store_sql"],
    "ratchet_tck": ["ratchet_tck"],
    "ratchet_core": ["ratchet_core"],
    "flask": ["flask", "ratchet_core.contrib.flask"],
    "django": ["django", "django_tasks", "ratchet_core.contrib.django"],
    "fastapi": ["fastapi", "ratchet_core.contrib.fastapi"],
    "sql": ["ratchet_store_sql"],
}
PER_LINE_TIMEOUT = 420


def install_lines(doc: str) -> list[tuple[str, str]]:
    """(checkout line, published line) of each install block of ``docs/<doc>``."""
    text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
    pairs = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        lines = block.splitlines()
        checkout = published = None
        for index, line in enumerate(lines[:-1]):
            if line.startswith(CHECKOUT_MARK):
                checkout = lines[index + 1].split("  #", 1)[0].strip()
            elif line.startswith(PUBLISHED_MARK):
                published = lines[index + 1].split("  #", 1)[0].strip()
        if checkout:
            assert published, f"docs/{doc}: a checkout install line without the published form"
            pairs.append((checkout, published))
    return pairs


def _modules(args: list[str]) -> list[str]:
    modules: list[str] = []
    for arg in args:
        match = re.fullmatch(r"\./(\w+)(?:\[([\w,]+)\])?", arg)
        assert match, f"{arg!r}: a checkout line installs ./<distribution>[extras] only"
        modules += IMPORTS[match.group(1)]
        for extra in (match.group(2) or "").split(","):
            modules += IMPORTS.get(extra, []) if extra else []
    return modules


def _extras(spec: str) -> set[str]:
    return {e for group in re.findall(r"\[([\w,]+)\]", spec) for e in group.split(",")}


@pytest.mark.parametrize("doc", DOCS)
def test_checkout_install_lines_of_the_docs_work_in_a_fresh_venv(doc: str, tmp_path: Path) -> None:
    pairs = install_lines(doc)
    assert pairs, f"docs/{doc} has no install line marked {CHECKOUT_MARK!r}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RATCHET_", "PYTHON"))}
    for number, (checkout, published) in enumerate(pairs):
        assert _extras(checkout) == _extras(published), (
            f"docs/{doc}: {checkout!r} and {published!r} install different extras"
        )
        words = shlex.split(checkout)
        assert words[:2] == ["pip", "install"], checkout
        venv = tmp_path / f"venv{number}"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        installed = subprocess.run(
            [str(venv / "bin" / "pip"), *words[1:]],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=PER_LINE_TIMEOUT,
            check=False,
        )
        assert installed.returncode == 0, f"docs/{doc}: {checkout}\n{installed.stderr[-3000:]}"
        modules = _modules(words[2:])
        imported = subprocess.run(
            [str(venv / "bin" / "python"), "-c", f"import {', '.join(modules)}"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert imported.returncode == 0, f"docs/{doc}: after {checkout}: {imported.stderr}"
