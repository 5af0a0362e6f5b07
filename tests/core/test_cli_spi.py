"""`ratchet spi` run as a real process: the installed console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RATCHET = Path(sys.executable).parent / "ratchet"


def run(
    args: list[str], *, cwd: Path = REPO, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")}
    full_env.update(env or {})
    return subprocess.run(
        [str(RATCHET), *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_spi_lists_every_spi_with_its_default() -> None:
    result = run(["spi"])
    assert result.returncode == 0, result.stderr
    for spi in (
        "RetryPolicy",
        "ErrorSanitizer",
        "ClassPolicy",
        "JobStore",
        "SchedulerLifecycleHook",
    ):
        assert spi in result.stdout
    assert "ratchet_core.defaults.security.DefaultErrorSanitizer" in result.stdout


def test_spi_with_the_reference_app_shows_its_override() -> None:
    result = run(["--app", "containers:create_container", "spi", "--json"])
    assert result.returncode == 0, result.stderr
    rows = {row["spi"]: row for row in json.loads(result.stdout)}
    assert rows["ErrorSanitizer"]["implementation"] == "containers.CardRedactingErrorSanitizer"
    assert rows["ErrorSanitizer"]["priority"] == 2000
    assert rows["ErrorSanitizer"]["origin"] == "explicit"
    assert rows["RetryPolicy"]["origin"] == "default"


def test_spi_table_shows_the_override_of_the_reference_app() -> None:
    result = run(["--app", "containers:create_container", "spi"])
    assert result.returncode == 0, result.stderr
    line = next(ln for ln in result.stdout.splitlines() if "ErrorSanitizer" in ln)
    assert (
        "containers.CardRedactingErrorSanitizer" in line and "2000" in line and "explicit" in line
    )


def test_spi_shows_a_decorator_module_from_configuration(tmp_path: Path) -> None:
    (tmp_path / "my_overrides.py").write_text(
        textwrap.dedent(
            """
            from ratchet_api import Priority
            from ratchet_api.spi import ErrorSanitizer
            from ratchet_core.runtime.alternatives import alternative


            @alternative(ErrorSanitizer, priority=Priority.APPLICATION + 100)
            class TerseSanitizer:
                def sanitize(self, error):
                    return type(error).__name__
            """
        )
    )
    result = run(
        ["spi", "--json"],
        cwd=tmp_path,
        env={"RATCHET_ALTERNATIVES_MODULES": "my_overrides", "PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    row = next(r for r in json.loads(result.stdout) if r["spi"] == "ErrorSanitizer")
    assert row["implementation"] == "my_overrides.TerseSanitizer"
    assert row["origin"] == "decorator module my_overrides"
    assert row["priority"] == 2100


def test_spi_reports_a_tie_as_an_error_naming_both(tmp_path: Path) -> None:
    (tmp_path / "tied.py").write_text(
        textwrap.dedent(
            """
            from ratchet_api.spi import ErrorSanitizer
            from ratchet_core.runtime.alternatives import alternative


            @alternative(ErrorSanitizer)
            class First:
                def sanitize(self, error):
                    return "first"


            @alternative(ErrorSanitizer)
            class Second:
                def sanitize(self, error):
                    return "second"
            """
        )
    )
    result = run(
        ["--set", "alternatives.modules=tied", "spi"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode != 0
    assert "tied.First" in result.stderr and "tied.Second" in result.stderr
    assert "ErrorSanitizer" in result.stderr


def test_bad_app_spec_is_a_usage_error() -> None:
    result = run(["--app", "containers", "spi"])
    assert result.returncode == 2
    assert "module:attribute" in result.stderr


@pytest.mark.parametrize("value", ["maybe"])
def test_malformed_configuration_names_the_key_and_environment_variable(value: str) -> None:
    result = run(["spi"], env={"RATCHET_ALTERNATIVES_ENTRY_POINTS": value})
    assert result.returncode != 0
    assert "alternatives.entry_points" in result.stderr
    assert "RATCHET_ALTERNATIVES_ENTRY_POINTS" in result.stderr
