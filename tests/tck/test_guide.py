"""docs/tck.md ("Adopting the TCK") works as written: its code is the example's code, its
commands run in a copy of the example and certify the store, and its contract table matches
the contracts."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ratchet_tck import ALL_CONTRACTS
from ratchet_tck.report import VERDICT_COMPATIBLE

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "tck.md"
EXAMPLE = ROOT / "examples" / "tck_example_store"
BIN = Path(sys.executable).parent


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", GUIDE.read_text(), flags=re.S)


def _guide_commands() -> list[str]:
    text = GUIDE.read_text()
    marker = text.index("<!-- guide-commands")
    block = re.search(r"```bash\n(.*?)```", text[marker:], flags=re.S)
    assert block is not None
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_guide_shows_the_example_files_verbatim() -> None:
    python_blocks = _blocks("python")
    for name in ("example_fixture.py", "test_example_store_tck.py"):
        assert (EXAMPLE / name).read_text() in python_blocks, f"docs/tck.md is out of date: {name}"


def test_guide_contract_table_matches_the_contracts() -> None:
    found = re.findall(r"^\| (\w+Contract) \| [^|]+ \| (\d+) \| (.+?) \|$", GUIDE.read_text(), re.M)
    rows = {name: (count, summary) for name, count, summary in found}
    actual = {
        c.__name__: (str(len([m for m in dir(c) if m.startswith("test_")])), c.summary)
        for c in ALL_CONTRACTS
    }
    assert rows == actual
    actual_counts = {name: count for name, (count, _) in actual.items()}
    total = sum(int(n) for n in actual_counts.values())
    assert f"{len(ALL_CONTRACTS)} contracts, {total} tests" in GUIDE.read_text()


def test_guide_commands_certify_the_example_store(tmp_path: Path) -> None:
    work = tmp_path / "example"
    shutil.copytree(EXAMPLE, work, ignore=shutil.ignore_patterns("build", "__pycache__"))
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("PYTHONPATH", None)
    commands = _guide_commands()
    assert [c.split()[0] for c in commands] == ["pytest", "pytest", "ratchet-tck"]
    for command in commands:
        done = subprocess.run(
            shlex.split(command),
            cwd=work,
            env=env,
            check=False,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
    for out in ("build/tck-pytest", "build/tck"):
        report = json.loads((work / out / "example-store.json").read_text())
        assert report["verdict"] == VERDICT_COMPATIBLE
        assert report["totals"]["failed"] == 0
        assert report["totals"]["total"] == sum(
            len([m for m in dir(c) if m.startswith("test_")]) for c in ALL_CONTRACTS
        )
        markdown = (work / out / "example-store.md").read_text()
        assert f"**Verdict: {VERDICT_COMPATIBLE}**" in markdown


def test_report_command_rejects_a_bad_fixture_path(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            str(BIN / "ratchet-tck"),
            "report",
            "--fixture",
            "no_such_module:make",
            "--out",
            str(tmp_path),
            "--name",
            "x",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "cannot import 'no_such_module'" in done.stderr


@pytest.mark.parametrize("spec", ["ratchet_tck.memory", "ratchet_tck.memory:NoSuch"])
def test_report_command_names_what_is_wrong_with_the_fixture(tmp_path: Path, spec: str) -> None:
    done = subprocess.run(
        [str(BIN / "ratchet-tck"), "report", "--fixture", spec, "--out", str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert spec in done.stderr


def test_guide_lists_every_store_method_with_its_contract() -> None:
    from ratchet_api.store import protocols

    text = GUIDE.read_text()
    kinds = [k for k in protocols.JobStore.__mro__ if k.__module__ == protocols.__name__] + list(
        protocols.CAPABILITIES
    )
    for kind in kinds:
        for name, member in vars(kind).items():
            if callable(member) and not name.startswith("_"):
                assert f"| `{kind.__name__}" in text and f"`{name}(" in text, (
                    f"docs/tck.md does not list {kind.__name__}.{name}"
                )
    assert '[project.entry-points."ratchet.stores"]' in text
