"""ratchet_core laid out by role (issue 24): a folder per role, every SPI default under
``ratchet_core.defaults``, and the pre-0.3 module paths still importable."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ratchet_core
from ratchet_core import RatchetContainer
from ratchet_core._moved import MOVED

PACKAGE = Path(ratchet_core.__file__).parent
ROLES = {
    "cli",
    "cluster",
    "contrib",
    "dashboard",
    "defaults",
    "enqueue",
    "features",
    "observability",
    "payload",
    "runtime",
    "worker",
}
DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_top_level_holds_folders_by_role_and_no_floor_of_modules() -> None:
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert modules == ["__init__.py", "_moved.py", "demo_jobs.py"]
    assert folders == ROLES


def test_every_folder_says_what_it_holds() -> None:
    for role in ROLES:
        doc = importlib.import_module(f"ratchet_core.{role}").__doc__
        assert doc and len(doc.strip()) > 40, role


def test_every_spi_default_is_importable_under_ratchet_core_defaults() -> None:
    table = (DOCS / "spi" / "README.md").read_text()
    for row in RatchetContainer().describe_spis():
        if row.implementation == "(none)":  # SchedulerLifecycleHook: a list, empty by default
            continue
        assert row.origin == "default"
        assert row.implementation.startswith("ratchet_core.defaults."), row
        assert f"| `{row.spi}` | `{row.provider}` | `{row.implementation}` |" in table, row.spi
        module_name, _, attribute = row.implementation.removeprefix("ratchet_core.").partition(".")
        path = row.implementation.split(".")
        for split in range(len(path) - 1, 1, -1):
            try:
                obj = importlib.import_module(".".join(path[:split]))
            except ModuleNotFoundError:
                continue
            for name in path[split:]:
                obj = getattr(obj, name)
            assert callable(obj), row.implementation
            break
        else:
            pytest.fail(f"{row.implementation} does not import")
        assert module_name == "defaults" and attribute


def test_pre_0_3_module_paths_import_the_moved_modules_with_a_deprecation_warning() -> None:
    # a fresh interpreter: the test session has imported every new path already
    code = (
        "import warnings, importlib\n"
        "warnings.simplefilter('error', DeprecationWarning)\n"
        "import ratchet_core\n"
        "from ratchet_core._moved import MOVED\n"
        "for old, new in MOVED.items():\n"
        "    try:\n"
        "        importlib.import_module('ratchet_core.' + old)\n"
        "    except DeprecationWarning as w:\n"
        "        assert ('ratchet_core.' + new) in str(w), w\n"
        "    else:\n"
        "        raise SystemExit('no warning for ' + old)\n"
        "warnings.simplefilter('ignore', DeprecationWarning)\n"
        "for old, new in MOVED.items():\n"
        "    a = importlib.import_module('ratchet_core.' + old)\n"
        "    b = importlib.import_module('ratchet_core.' + new)\n"
        "    assert a is b, old\n"
        "from ratchet_core.recurring.service import RecurringService\n"
        "from ratchet_core.features.recurring.service import RecurringService as R2\n"
        "assert RecurringService is R2\n"
        "from ratchet_core.payload import decode_backoff\n"
        "from ratchet_core.cluster import StoreBackedStartupCoordinator\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_no_code_docs_or_example_uses_an_old_path() -> None:
    root = Path(__file__).resolve().parents[2]
    old = re.compile(r"ratchet_core\.(" + "|".join(sorted(MOVED, key=len, reverse=True)) + r")\b")
    offenders = []
    for folder in (
        "ratchet_core/src",
        "ratchet_store_sql/src",
        "ratchet_tck/src",
        "docs",
        "examples",
    ):
        for path in (root / folder).rglob("*"):
            if path.suffix not in {".py", ".md", ".toml"} or path.name == "_moved.py":
                continue
            if "compatibility" in path.parts:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if old.search(line) and path.name != "code-map.md":
                    offenders.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    assert offenders == []


def test_logger_names_stay_what_they_were_before_the_folders() -> None:
    from ratchet_core.cli.worker import logger_name

    assert logger_name("ratchet_core.observability.metrics") == "ratchet.metrics"
    assert logger_name("ratchet_core.features.recurring.sweeper") == "ratchet.recurring.sweeper"
    assert logger_name("ratchet_core.enqueue.scheduler") == "ratchet.scheduler"
    assert logger_name("ratchet_core.worker.core") == "ratchet.worker.core"
    assert logger_name("ratchet_core.cluster.coordination") == "ratchet.cluster.coordination"
    assert logger_name("myapp.jobs") == "myapp.jobs"


def test_no_module_of_ratchet_core_is_over_600_lines_and_the_worker_facade_over_400() -> None:
    # issue 23: a module that grows past this is doing more than one job; split it by role
    sizes = {
        str(p.relative_to(PACKAGE)): len(p.read_text(encoding="utf-8").splitlines())
        for p in PACKAGE.rglob("*.py")
    }
    assert {name: n for name, n in sizes.items() if n > 600} == {}
    assert sizes[str(Path("worker", "core.py"))] <= 400
