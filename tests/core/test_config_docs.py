"""docs/configuration.md lists every registered configuration key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_configuration_doc_lists_every_registered_key() -> None:
    sys.path.insert(0, str(REPO / "docs"))
    try:
        import gen_config_table
    finally:
        sys.path.remove(str(REPO / "docs"))
    keys = gen_config_table.collect_keys()
    doc = (REPO / "docs" / "configuration.md").read_text()
    missing = [k.name for k in keys.values() if f"`{k.name}`" not in doc]
    assert not missing, f"regenerate with `python docs/gen_config_table.py`; missing {missing}"
    for key in keys.values():
        assert f"`{key.environment_variable}`" in doc


def test_generator_check_mode_passes_on_the_committed_doc() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "docs" / "gen_config_table.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
