"""Configuration as hostile input (issue 26): unknown keys are refused naming the closest
valid key (a typo in a security setting is never silent); a ``ratchet.toml`` in the working
directory is announced; a file named like a standard-library module there does not replace it;
``security.allowed_packages = *`` is said loudly by ``ratchet enqueue``, ``ratchet health`` and
``ratchet config``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ratchet_api.errors import UnknownConfigurationKeyError
from ratchet_core.runtime.config import check_known_keys, closest_key, is_known_key
from ratchet_core.runtime.container import RatchetContainer

RATCHET = Path(sys.executable).with_name("ratchet")
REPO = Path(__file__).resolve().parents[2]


def ratchet(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = dict(os.environ, PYTHONPATH=str(REPO), **env)
    for name in ("RATCHET_STORE_URL", "RATCHET_CONFIG_FILE", "RATCHET_SECURITY_ALLOWED_PACKAGES"):
        if name not in env:
            environ.pop(name, None)
    return subprocess.run(
        [str(RATCHET), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environ,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("payload.masking", "security.mask_payloads"),
        ("security.allowed_package", "security.allowed_packages"),
        ("store.ulr", "store.url"),
        ("limits.max_payload", "limits.max_payload_bytes"),
    ],
)
def test_an_unknown_override_is_refused_at_build_naming_the_closest_key(
    tmp_path: Path, typo: str, meant: str
) -> None:
    container = RatchetContainer(
        overrides={"store.url": f"sqlite:///{tmp_path / 'x.db'}", typo: "true"}
    )
    with pytest.raises(UnknownConfigurationKeyError) as info:
        container.build()
    assert info.value.key == typo and info.value.suggestion == meant
    assert typo in str(info.value) and meant in str(info.value)


def test_known_keys_and_key_families_pass() -> None:
    assert is_known_key("worker.concurrency.async")  # a documented family
    assert is_known_key("limits.max_job_log_lines")
    assert not is_known_key("nonsense.value") and closest_key("nonsense.value") is None
    from ratchet_core.runtime.config import DefaultRatchetConfig

    check_known_keys(DefaultRatchetConfig.from_dict({"worker.concurrency.async": 2}))


def test_unknown_keys_of_a_toml_file_are_refused_and_the_file_is_announced(
    tmp_path: Path,
) -> None:
    (tmp_path / "ratchet.toml").write_text(
        f'[ratchet]\nstore.url = "sqlite:///{tmp_path / "r.db"}"\n'
        '"security.alowed_packages" = "myapp"\n'
    )
    refused = ratchet(tmp_path, "config")
    assert refused.returncode == 1
    assert "security.alowed_packages" in refused.stderr
    assert "did you mean 'security.allowed_packages'" in refused.stderr
    (tmp_path / "ratchet.toml").write_text(
        f'[ratchet]\nstore.url = "sqlite:///{tmp_path / "r.db"}"\n'
        '"security.allowed_packages" = "myapp"\n'
    )
    shown = ratchet(tmp_path, "config", "--json")
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    row = next(r for r in report["keys"] if r["key"] == "security.allowed_packages")
    assert row == {
        "key": "security.allowed_packages",
        "value": "myapp",
        "source": f"TOML file {tmp_path / 'ratchet.toml'}",
    }
    assert report["files"] == [str(tmp_path / "ratchet.toml")]
    assert "found in the working directory" in shown.stderr  # it sets a security key: loudly
    table = ratchet(tmp_path, "config")
    assert table.returncode == 0 and "security.allowed_packages" in table.stdout
    typo = ratchet(tmp_path, "--set", "payload.masking=true", "config")
    assert typo.returncode == 1 and "security.mask_payloads" in typo.stderr


def test_a_file_named_like_a_standard_module_in_the_cwd_does_not_replace_it(
    tmp_path: Path,
) -> None:
    for name in ("tomllib", "json", "logging"):
        (tmp_path / f"{name}.py").write_text(
            f'raise SystemExit("the cwd {name}.py was imported")\n'
        )
    (tmp_path / "ratchet.toml").write_text(
        f'[ratchet]\nstore.url = "sqlite:///{tmp_path / "r.db"}"\n'
    )
    result = ratchet(tmp_path, "config")
    assert result.returncode == 0, result.stderr
    assert "was imported" not in result.stdout + result.stderr


def test_allowing_everything_is_said_loudly(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    assert ratchet(tmp_path, "db", "upgrade", "--url", url).returncode == 0
    star = {"RATCHET_SECURITY_ALLOWED_PACKAGES": "*"}
    enqueued = ratchet(
        tmp_path, "enqueue", "tests.engine.targets:add", "1", "2", "--url", url, **star
    )
    assert enqueued.returncode == 0, enqueued.stderr
    assert "security.allowed_packages is '*'" in enqueued.stderr
    health = ratchet(tmp_path, "health", "--url", url, **star)
    assert health.returncode == 0, health.stdout + health.stderr
    assert "WARN" in health.stdout and "allowed_packages is '*'" in health.stdout
    quiet = ratchet(tmp_path, "health", "--url", url, RATCHET_SECURITY_ALLOWED_PACKAGES="tests.")
    assert quiet.returncode == 0 and "WARN" not in quiet.stdout
