"""A third-party store the way users get one: the frozen store SPI 1.0 store
(``tests/tck/v1_store``) is pip-installed as a distribution into a fresh venv, found through
its ``ratchet.stores`` entry point, certified by ``ratchet-tck report`` and run by
``ratchet worker``; ``ratchet health`` names the features its version disables.

Nothing is downloaded: the venv reaches the development environment's packages (Ratchet, its
dependencies, the hatchling build backend) through a ``.pth`` file, and the store is installed
with ``--no-index --no-deps --no-build-isolation``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
import venv
from pathlib import Path

import pytest

from ratchet_tck.report import VERDICT_COMPATIBLE
from tests.tck.v1_support import V1_STORE

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=240, check=False
    )


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"{done.args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv with the store distribution installed (and nothing else of its own)."""
    home = tmp_path_factory.mktemp("venv") / "env"
    venv.EnvBuilder(with_pip=False).create(home)
    python = home / "bin" / "python"
    site_packages = Path(
        _ok(
            _run([str(python), "-c", "import site; print(site.getsitepackages()[0])"], home, {})
        ).strip()
    )
    development = sysconfig.get_paths()["purelib"]  # this environment: Ratchet and its deps
    (site_packages / "_ratchet_development.pth").write_text(
        f"import site; site.addsitedir({development!r})\n"
    )
    env = _clean_env()
    _ok(
        _run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-index",
                "--no-deps",
                "--no-build-isolation",
                str(V1_STORE),
            ],
            home,
            env,
        )
    )
    installed = site_packages / "ratchet_v1_sqlite"
    assert installed.is_dir(), "the store was not installed into the venv's own site-packages"
    return python


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RATCHET_", "PYTHON"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _ratchet(python: Path, cwd: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = _clean_env()
    env["RATCHET_STORE_URL"] = url
    env["PYTHONPATH"] = str(ROOT)  # the job targets (tests.engine.targets)
    env["RATCHET_SECURITY_ALLOWED_PACKAGES"] = "tests."
    code = "import sys; from ratchet_core.cli import main; sys.argv[0] = 'ratchet'; main()"
    return _run([str(python), "-c", code, *args], cwd, env)


def test_the_installed_store_is_found_by_its_entry_point(fresh_venv: Path, tmp_path: Path) -> None:
    code = (
        "from ratchet_core.runtime.stores import store_entry_points\n"
        "ep = store_entry_points()['v1sqlite']\n"
        "print(ep.value, ep.dist.name if ep.dist else None)\n"
        "import ratchet_v1_sqlite; print(ratchet_v1_sqlite.__file__)\n"
    )
    out = _ok(_run([str(fresh_venv), "-c", code], tmp_path, _clean_env())).split()
    assert out[:2] == ["ratchet_v1_sqlite:open_store", "ratchet-v1-sqlite"]
    assert out[2].startswith(str(fresh_venv.parents[1]))  # imported from the venv, not tests/


def test_ratchet_tck_certifies_the_installed_store_for_its_version(
    fresh_venv: Path, tmp_path: Path
) -> None:
    done = _run(
        [
            str(fresh_venv),
            "-m",
            "ratchet_tck.cli",
            "report",
            "--fixture",
            "ratchet_v1_sqlite.tck:make_fixture",
            "--out",
            str(tmp_path / "out"),
            "--name",
            "v1",
        ],
        tmp_path,
        _clean_env(),
    )
    assert "v1: Ratchet Store Compatible for store SPI 1.0" in _ok(done)
    report = json.loads((tmp_path / "out" / "v1.json").read_text())
    assert report["verdict"] == VERDICT_COMPATIBLE
    assert (report["spi"]["declared"], report["spi"]["met"]) == ("1.0", "1.0")


def test_ratchet_worker_runs_jobs_on_the_installed_store(fresh_venv: Path, tmp_path: Path) -> None:
    url = f"v1sqlite:///{tmp_path / 'jobs.db'}"
    job_ids = [
        _ok(
            _ratchet(
                fresh_venv,
                tmp_path,
                url,
                "enqueue",
                "tests.engine.targets:add",
                str(n),
                "1",
            )
        ).strip()
        for n in range(3)
    ]
    worker = _ratchet(fresh_venv, tmp_path, url, "worker", "--burst", "--burst-timeout", "60")
    _ok(worker)
    assert "store SPI 1.0" in worker.stderr  # the adapter's warning names what is disabled
    for n, job_id in enumerate(job_ids):
        shown = _ok(_ratchet(fresh_venv, tmp_path, url, "jobs", "show", job_id))
        assert "SUCCEEDED" in shown and str(n + 1) in shown
    health = _ratchet(fresh_venv, tmp_path, url, "health", "--json")
    checks = json.loads(_ok(health))["checks"]
    assert checks["spi"]["ok"] is True
    assert "store SPI 1.0 (this Ratchet: 1.1)" in checks["spi"]["detail"]
    assert "workflow steps" in checks["spi"]["detail"]
