"""Each distribution builds as a wheel and imports with only its declared dependencies.

Proves the import direction of the design on real installs: ``ratchet-api`` alone;
``ratchet-core`` (and ``ratchet spi``) without any store; each store without ``ratchet-core``
(and the Mongo store without SQLAlchemy); ``ratchet-tck`` with only ``ratchet-api``.

Wheels are built without isolation (hatchling from the development venv); their dependencies
are downloaded once into a wheelhouse; every fresh venv then installs with ``--no-index`` from
that wheelhouse only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
DISTRIBUTIONS = {
    "ratchet-api": "ratchet_api",
    "ratchet-core": "ratchet_core",
    "ratchet-store-sql": "ratchet_store_sql",
    "ratchet-store-mongo": "ratchet_store_mongo",
    "ratchet-tck": "ratchet_tck",
}
# Modules that need an optional extra (Flask, Django, prometheus-client) or a running
# migration context.
SKIPPED_MODULES = (
    "ratchet_core.contrib",
    "ratchet_core.observability.prometheus",
    "ratchet_store_sql.migrations",
)


def _run(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RATCHET_", "PYTHON"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    result = subprocess.run(
        args, capture_output=True, text=True, timeout=300, env=env, check=False, cwd=cwd
    )
    assert result.returncode == 0, f"{' '.join(args)}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("hatchling", reason="hatchling must be installed to build wheels")
    missing = [d for d in DISTRIBUTIONS.values() if not (REPO / d / "src" / d).is_dir()]
    if missing:
        pytest.fail(f"distribution sources missing: {missing}")
    dist = tmp_path_factory.mktemp("dist")
    for folder in DISTRIBUTIONS.values():
        _run(
            [
                sys.executable,
                "-m",
                "build",
                "--wheel",
                "--no-isolation",
                "--outdir",
                str(dist),
                str(REPO / folder),
            ]
        )
    house = tmp_path_factory.mktemp("wheelhouse")
    wheels = sorted(str(w) for w in dist.glob("*.whl"))
    assert len(wheels) == len(DISTRIBUTIONS), wheels
    # Dependencies of every wheel (pip's cache makes repeated runs fast).
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--only-binary=:all:",
            "--find-links",
            str(dist),
            "--dest",
            str(house),
            *wheels,
        ]
    )
    return house


def _venv(root: Path, name: str) -> Path:
    target = root / name
    _run([sys.executable, "-m", "venv", "--without-pip", str(target)])
    return target / "bin" / "python"


def _install(python: Path, house: Path, *distributions: str) -> None:
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-index",
            "--find-links",
            str(house),
            *distributions,
        ]
    )


def _check(python: Path, package: str, *, absent: tuple[str, ...]) -> None:
    """Import every module of ``package`` and prove that ``absent`` cannot be imported."""
    script = textwrap.dedent(
        f"""
        import importlib, importlib.util, pkgutil, sys
        for name in {absent!r}:
            assert importlib.util.find_spec(name) is None, name + " is installed"
        package = importlib.import_module({package!r})
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if module.name.startswith({SKIPPED_MODULES!r}):
                continue
            importlib.import_module(module.name)
        for name in {absent!r}:
            assert name not in sys.modules, name
        print("ok", package.__name__)
        """
    )
    result = _run([str(python), "-c", script], cwd=python.parent)
    assert f"ok {package}" in result.stdout


def test_api_alone_and_tck_with_only_the_api(wheelhouse: Path, tmp_path: Path) -> None:
    python = _venv(tmp_path, "api")
    _install(python, wheelhouse, "ratchet-api")
    _check(python, "ratchet_api", absent=("ratchet_core", "dependency_injector", "sqlalchemy"))
    _install(python, wheelhouse, "ratchet-tck")
    _check(python, "ratchet_tck", absent=("ratchet_core", "sqlalchemy", "pymongo"))


def test_core_without_any_store_imports_and_runs_ratchet_spi(
    wheelhouse: Path, tmp_path: Path
) -> None:
    python = _venv(tmp_path, "core")
    _install(python, wheelhouse, "ratchet-core")
    _check(
        python,
        "ratchet_core",
        absent=("ratchet_store_sql", "ratchet_store_mongo", "sqlalchemy", "pymongo"),
    )
    result = _run([str(python.parent / "ratchet"), "spi", "--json"], cwd=tmp_path)
    assert '"spi": "JobStore"' in result.stdout
    assert "ratchet_core.defaults.retry.DefaultRetryPolicy" in result.stdout


def test_stores_without_the_engine_and_mongo_without_sqlalchemy(
    wheelhouse: Path, tmp_path: Path
) -> None:
    python = _venv(tmp_path, "stores")
    _install(python, wheelhouse, "ratchet-store-mongo")
    _check(python, "ratchet_store_mongo", absent=("ratchet_core", "sqlalchemy"))
    _install(python, wheelhouse, "ratchet-store-sql")
    _check(python, "ratchet_store_sql", absent=("ratchet_core",))
