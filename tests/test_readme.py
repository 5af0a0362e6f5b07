"""The README's example runs as written: its two files, then its commands, in a fresh project
directory on SQLite."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _blocks(language: str) -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


@pytest.mark.slow
def test_readme_example_enqueues_and_a_worker_runs_the_jobs(tmp_path: Path) -> None:
    jobs, main = _blocks("python")[:2]
    assert jobs.startswith("# myapp/jobs.py") and main.startswith("# myapp/main.py")
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "jobs.py").write_text(jobs)
    (tmp_path / "myapp" / "main.py").write_text(main)
    commands = [
        line.split("#", 1)[0].strip()
        for line in _blocks("bash")[-1].splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert commands[0].endswith("db upgrade") and commands[2].endswith("worker")
    commands[2] += " --burst"  # the README's worker runs until Ctrl-C; stop when idle here
    outputs = []
    for command in commands:
        argv = shlex.split(command)
        argv[0] = str(BIN / argv[0]) if argv[0] != "python" else sys.executable
        done = subprocess.run(
            argv,
            cwd=tmp_path,
            env={**os.environ, "COLUMNS": "250"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        outputs.append(done.stdout)
    listing = outputs[-1]
    for n in (42, 44, 45):
        assert f"invoice {n} sent to" in listing
    assert listing.count("SUCCEEDED") == 3 and listing.count("PENDING") == 1  # 43 is in 5 min
