"""Running the contracts programmatically (the ``ratchet-tck report`` command uses this)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from ratchet_tck.contracts.base import StoreContract
from ratchet_tck.registry import ALL_CONTRACTS


def run_contracts(
    fixture: str,
    out: Path | str,
    name: str,
    *,
    contracts: Sequence[type[StoreContract]] = ALL_CONTRACTS,
    extra_args: Sequence[str] = (),
    in_process: bool = False,
    spi: str | None = None,
) -> tuple[int, dict[str, object]]:
    """Run ``contracts`` against the fixture import path, write the report into ``out`` and
    return pytest's exit code with the report's JSON.

    By default pytest runs in a child interpreter (``python -m pytest``) with the current
    directory importable, so assertion rewriting and the caller's state stay clean;
    ``in_process=True`` runs ``pytest.main`` here instead. ``spi`` (``"1.0"``) certifies for
    that store SPI version instead of the one the store declares."""
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    selected = " or ".join(f"Test{c.__name__}" for c in contracts)
    with tempfile.TemporaryDirectory(prefix="ratchet-tck-") as tmp:
        ini = Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\n", encoding="utf-8")  # isolate from the caller's pytest settings
        args = [
            "--pyargs",
            "ratchet_tck.suite",
            "-c",
            str(ini),
            "--rootdir",
            tmp,
            "-p",
            "no:cacheprovider",
            # Store contracts need no web framework; a pytest-django set up by the caller's
            # process or environment must not leak into the run.
            "-p",
            "no:django",
            "-q",
            "--ratchet-tck-fixture",
            fixture,
            "--ratchet-tck-report",
            str(out_dir),
            "--ratchet-tck-name",
            name,
        ]
        if spi:
            args += ["--ratchet-tck-spi", spi]
        if len(contracts) != len(ALL_CONTRACTS):
            args += ["-k", selected]
        if in_process:
            code = int(pytest.main([*args, *extra_args]))
        else:
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (os.getcwd(), env.get("PYTHONPATH", "")) if p
            )
            code = subprocess.call([sys.executable, "-m", "pytest", *args, *extra_args], env=env)
    reports = sorted(out_dir.glob("*.json"), key=lambda p: p.stat().st_mtime)
    data: dict[str, object] = json.loads(reports[-1].read_text()) if reports else {}
    return code, data
