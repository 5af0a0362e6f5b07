"""The configuration chain: sources, precedence, typed parsing and errors naming the key."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from ratchet_api.errors import ConfigurationError
from ratchet_api.spi import RatchetConfigKey
from ratchet_core.defaults.execution import WORKER_CONCURRENCY
from ratchet_core.runtime.config import (
    KEYS,
    STORE_URL,
    DefaultRatchetConfig,
    DictConfigSource,
    EnvironmentConfigSource,
    TomlFileConfigSource,
    parse_bool,
    parse_duration,
    parse_float,
    parse_int,
    parse_str_list,
    register_key,
)
from ratchet_core.runtime.container import create_container

TOML = """
[ratchet]
store.url = "sqlite:///from-toml.db"

[ratchet.worker]
concurrency = 7
"""


def chain(
    overrides: dict[str, object] | None = None,
    environ: dict[str, str] | None = None,
    toml: Path | None = None,
) -> DefaultRatchetConfig:
    return DefaultRatchetConfig(
        [
            DictConfigSource(overrides),
            EnvironmentConfigSource(environ or {}),
            TomlFileConfigSource(toml),
        ]
    )


def test_key_default_applies_when_no_source_defines_it() -> None:
    assert chain().get(STORE_URL) == "sqlite:///ratchet.db"
    assert chain().get(WORKER_CONCURRENCY) == 4


def test_each_source_alone_is_read(tmp_path: Path) -> None:
    toml = tmp_path / "ratchet.toml"
    toml.write_text(TOML)
    assert chain(overrides={"store.url": "sqlite:///a.db"}).get(STORE_URL) == "sqlite:///a.db"
    assert chain(environ={"RATCHET_STORE_URL": "sqlite:///b.db"}).get(STORE_URL) == "sqlite:///b.db"
    assert chain(toml=toml).get(STORE_URL) == "sqlite:///from-toml.db"
    assert chain(toml=toml).get(WORKER_CONCURRENCY) == 7


def test_precedence_is_overrides_then_environment_then_toml_then_default(tmp_path: Path) -> None:
    toml = tmp_path / "ratchet.toml"
    toml.write_text(TOML)
    env = {"RATCHET_STORE_URL": "sqlite:///env.db", "RATCHET_WORKER_CONCURRENCY": "3"}
    config = chain(overrides={"store.url": "sqlite:///explicit.db"}, environ=env, toml=toml)
    assert config.get(STORE_URL) == "sqlite:///explicit.db"
    assert config.get(WORKER_CONCURRENCY) == 3
    assert config.source_of(STORE_URL) == "explicit overrides"
    assert chain(environ=env, toml=toml).get(STORE_URL) == "sqlite:///env.db"


def test_malformed_environment_value_names_key_variable_and_value() -> None:
    config = chain(environ={"RATCHET_WORKER_CONCURRENCY": "lots"})
    with pytest.raises(ConfigurationError) as info:
        config.get(WORKER_CONCURRENCY)
    assert info.value.key == "worker.concurrency"
    assert "RATCHET_WORKER_CONCURRENCY" in str(info.value)
    assert "'lots'" in str(info.value)


def test_value_below_minimum_names_the_bound_and_the_source(tmp_path: Path) -> None:
    toml = tmp_path / "ratchet.toml"
    toml.write_text("[ratchet]\nworker.concurrency = 0\n")
    with pytest.raises(ConfigurationError, match=r"worker\.concurrency.*TOML file.*>= 1"):
        chain(toml=toml).get(WORKER_CONCURRENCY)


def test_malformed_toml_file_is_reported_with_its_path(tmp_path: Path) -> None:
    toml = tmp_path / "ratchet.toml"
    toml.write_text("[ratchet\n")
    with pytest.raises(ConfigurationError, match=r"ratchet\.toml"):
        TomlFileConfigSource(toml)


def test_explicit_config_file_must_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RATCHET_CONFIG_FILE", str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigurationError, match=r"missing\.toml"):
        TomlFileConfigSource.discover()


def test_toml_in_the_working_directory_is_discovered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ratchet.toml").write_text(TOML)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RATCHET_CONFIG_FILE", raising=False)
    monkeypatch.delenv("RATCHET_STORE_URL", raising=False)
    container = create_container()
    assert container.settings().get(STORE_URL) == "sqlite:///from-toml.db"


def test_container_overrides_beat_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RATCHET_STORE_URL", "sqlite:///env.db")
    container = create_container({"store.url": "sqlite:///explicit.db"})
    assert container.settings().get(STORE_URL) == "sqlite:///explicit.db"
    assert create_container().settings().get(STORE_URL) == "sqlite:///env.db"


def test_dict_source_converts_python_values() -> None:
    config = chain(overrides={"alternatives.entry_points": False, "worker.concurrency": 9})
    from ratchet_core.runtime.config import ALTERNATIVES_ENTRY_POINTS

    assert config.get(ALTERNATIVES_ENTRY_POINTS) is False
    assert config.get(WORKER_CONCURRENCY) == 9


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("true", True), ("FALSE", False), ("1", True), ("0", False), ("yes", True), ("No", False)],
)
def test_bool_parser_accepts_the_documented_spellings(raw: str, expected: bool) -> None:
    assert parse_bool(raw) is expected


def test_bool_parser_refuses_anything_else() -> None:
    with pytest.raises(ValueError, match="maybe"):
        parse_bool("maybe")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2", timedelta(seconds=2)),
        ("1.5", timedelta(seconds=1.5)),
        ("500ms", timedelta(milliseconds=500)),
        ("2s", timedelta(seconds=2)),
        ("5m", timedelta(minutes=5)),
        ("1h", timedelta(hours=1)),
    ],
)
def test_duration_parser(raw: str, expected: timedelta) -> None:
    assert parse_duration(raw) == expected


@pytest.mark.parametrize("raw", ["-1s", "fast", "5 parsecs", ""])
def test_duration_parser_refuses_malformed(raw: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(raw)


def test_int_and_float_parsers_enforce_bounds() -> None:
    assert parse_int(minimum=1)("3") == 3
    with pytest.raises(ValueError, match=">= 1"):
        parse_int(minimum=1)("0")
    assert parse_float(maximum=100.0)("99.5") == 99.5
    with pytest.raises(ValueError, match="<= 100"):
        parse_float(maximum=100.0)("101")
    with pytest.raises(ValueError):
        parse_float()("nan")


def test_str_list_parser_drops_blanks() -> None:
    assert parse_str_list(" a, b ,,c ") == ("a", "b", "c")
    assert parse_str_list("") == ()


def test_registering_a_different_key_under_a_taken_name_fails() -> None:
    with pytest.raises(ValueError, match=r"store\.url"):
        register_key(RatchetConfigKey("store.url", str, "other", ""))
    assert KEYS["store.url"] is STORE_URL


def test_an_environment_alias_sets_its_key_and_the_own_variable_wins() -> None:
    from ratchet_core.payload.masking import MASK_PAYLOADS

    assert chain().get(MASK_PAYLOADS) is False
    assert chain(environ={"RATCHET_MASK_PAYLOADS": "true"}).get(MASK_PAYLOADS) is True
    both = {"RATCHET_MASK_PAYLOADS": "true", "RATCHET_SECURITY_MASK_PAYLOADS": "false"}
    assert chain(environ=both).get(MASK_PAYLOADS) is False
    assert chain(environ={"RATCHET_MASK_PAYLOADS": "1"}).source_of(MASK_PAYLOADS) == "environment"
    with pytest.raises(ConfigurationError, match="environment variable RATCHET_MASK_PAYLOADS"):
        chain(environ={"RATCHET_MASK_PAYLOADS": "maybe"}).get(MASK_PAYLOADS)


def test_an_alias_taken_by_another_key_is_refused() -> None:
    taken = RatchetConfigKey("test.alias_clash", str, "", "")
    with pytest.raises(ValueError, match=r"'store\.url''s own"):
        register_key(taken, env_aliases=("RATCHET_STORE_URL",))
    with pytest.raises(ValueError, match=r"taken by 'security\.mask_payloads'"):
        register_key(taken, env_aliases=("RATCHET_MASK_PAYLOADS",))
    with pytest.raises(ValueError, match="RATCHET_ followed by upper case"):
        register_key(taken, env_aliases=("mask_payloads",))
    with pytest.raises(ValueError, match=r"is an alias of 'security\.mask_payloads'"):
        register_key(RatchetConfigKey("mask.payloads", str, "", ""))
    assert "test.alias_clash" not in KEYS and "mask.payloads" not in KEYS
