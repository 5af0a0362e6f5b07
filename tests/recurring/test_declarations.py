"""Declaring recurring jobs with ``@recurring`` and from configuration (a dict, ratchet.toml,
Django's ``RATCHET``, Flask's ``RATCHET_RECURRING``), registered when a worker starts."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ratchet_api.errors import ConfigurationError, InvalidScheduleError, InvalidTargetError
from ratchet_api.model import JobStatus
from ratchet_api.store.entities import JobQuery, MisfirePolicy
from ratchet_core.features.recurring import recurring
from ratchet_core.features.recurring.declarations import REGISTRY, DeclarationRegistry, from_config
from ratchet_core.features.recurring.template import decode_template
from ratchet_core.runtime.config import DefaultRatchetConfig, DictConfigSource, TomlFileConfigSource
from tests.engine.conftest import build_container, migrate
from tests.recurring import targets

ENTRY = {
    "id": "cfg-report",
    "cron": "0 3 * * *",
    "tz": "Europe/Berlin",
    "target": "tests.recurring.targets:tick",
    "args": ["nightly"],
    "misfire": "fire_all",
    "priority": "high",
    "tags": ["ops"],
    "max_retries": 5,
    "backoff": 30,
}


def config_of(source: Any) -> DefaultRatchetConfig:
    return DefaultRatchetConfig([source])


def check_entry(config: DefaultRatchetConfig) -> None:
    [declaration] = from_config(config)
    assert declaration.recurring_id == "cfg-report"
    assert declaration.fn is targets.tick and declaration.args == ("nightly",)
    assert declaration.options.tz == "Europe/Berlin"
    assert declaration.options.misfire is MisfirePolicy.FIRE_ALL
    assert declaration.options.tags == ("ops",) and declaration.options.max_retries == 5


def test_config_from_a_dict_source() -> None:
    check_entry(config_of(DictConfigSource({"recurring": [ENTRY]})))


def test_config_from_ratchet_toml(tmp_path: Path) -> None:
    path = tmp_path / "ratchet.toml"
    path.write_text(
        "[[ratchet.recurring]]\n"
        'id = "cfg-report"\ncron = "0 3 * * *"\ntz = "Europe/Berlin"\n'
        'target = "tests.recurring.targets:tick"\nargs = ["nightly"]\nmisfire = "fire_all"\n'
        'priority = "high"\ntags = ["ops"]\nmax_retries = 5\nbackoff = 30\n'
    )
    check_entry(config_of(TomlFileConfigSource(path)))


def test_config_from_django_settings() -> None:
    from ratchet_core.contrib.django.conf import DjangoSettingsSource

    check_entry(config_of(DjangoSettingsSource({"recurring": [ENTRY]})))


def test_config_from_flask_app_config() -> None:
    flask = pytest.importorskip("flask", reason="the flask extra is not installed")
    from ratchet_core.contrib.flask import FlaskConfigSource

    app = flask.Flask(__name__)
    app.config["RATCHET_RECURRING"] = [ENTRY]
    check_entry(config_of(FlaskConfigSource(app)))


def test_config_from_the_environment_as_json() -> None:
    import json

    from ratchet_core.runtime.config import EnvironmentConfigSource

    env = {"RATCHET_RECURRING": json.dumps([ENTRY])}
    check_entry(config_of(EnvironmentConfigSource(env)))


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"target": "tests.recurring.targets:nope"}, "cannot import target"),
        ({"target": "no-colon"}, "module:function"),
        ({"cron": "0 3 * *"}, "4 fields"),
        ({"tz": "Nowhere/Land"}, "unknown time zone"),
        ({"misfire": "maybe"}, "misfire policy"),
        ({"colour": "red"}, "unknown recurring option"),
        ({"id": ""}, "recurring id"),
    ],
)
def test_bad_config_entries_name_the_entry_and_the_problem(
    change: dict[str, Any], fragment: str
) -> None:
    entry = {**ENTRY, **change}
    with pytest.raises(ConfigurationError, match=fragment) as info:
        from_config(config_of(DictConfigSource({"recurring": [entry]})))
    assert "entry 0" in str(info.value) and info.value.key == "recurring"


def test_decorator_validates_at_decoration_and_returns_the_function() -> None:
    registry = DeclarationRegistry()
    with pytest.raises(InvalidScheduleError, match="unknown time zone"):
        recurring("0 3 * * *", tz="Nowhere/Land", registry=registry)
    with pytest.raises(InvalidScheduleError, match="invalid cron"):
        recurring("0 99 * * *", registry=registry)
    decorated = recurring("@daily", registry=registry, priority="high")(targets.tick)
    assert decorated is targets.tick
    [declaration] = registry.all()
    assert declaration.recurring_id == "tests.recurring.targets.tick"


def test_worker_start_declares_decorated_and_configured_jobs_and_fires_them(
    tmp_path: Path,
) -> None:
    decorated_id = f"deco-{uuid.uuid4().hex[:8]}"
    recurring(every=timedelta(seconds=1), id=decorated_id, args=["deco"])(targets.tick)
    container = build_container(
        f"sqlite:///{tmp_path / 'r.db'}",
        **{
            "worker.poll_max_interval": 0.1,
            "recurring.poll_interval": 0.1,
            "recurring": [{**ENTRY, "cron": None, "every": 1}],
        },
    )
    store = container.job_store()
    migrate(store)
    worker = container.worker()
    try:
        worker.start()
        scheduler = container.scheduler()
        declared = {d.name: d for d in scheduler.recurring_jobs.list()}
        assert set(declared) >= {decorated_id, "cfg-report"}
        assert decode_template(declared["cfg-report"]).tags == ("ops",)
        deadline = time.monotonic() + 30
        done: list[Any] = []
        while time.monotonic() < deadline:
            done = scheduler.search(
                JobQuery(tag=f"recurring:{decorated_id}", statuses=frozenset({JobStatus.SUCCEEDED}))
            )
            if len(done) >= 2:
                break
            time.sleep(0.05)
        assert len(done) >= 2, "the decorated recurring job did not run twice within 30 s"
    finally:
        worker.stop()
        REGISTRY.remove(decorated_id)
        store.close()


def test_worker_start_fails_for_a_refused_decorated_target(tmp_path: Path) -> None:
    def nested() -> None: ...

    bad_id = f"bad-{uuid.uuid4().hex[:8]}"
    recurring("@daily", id=bad_id)(nested)
    container = build_container(f"sqlite:///{tmp_path / 'r.db'}")
    store = container.job_store()
    migrate(store)
    worker = container.worker()
    try:
        with pytest.raises(InvalidTargetError, match=bad_id):
            worker.start()
        assert not worker.running
    finally:
        REGISTRY.remove(bad_id)
        store.close()


def test_recurring_modules_are_imported_at_worker_start(tmp_path: Path) -> None:
    container = build_container(
        f"sqlite:///{tmp_path / 'r.db'}", **{"recurring.modules": "tests.recurring.decorated_jobs"}
    )
    store = container.job_store()
    migrate(store)
    worker = container.worker()
    try:
        worker.start()
        from tests.recurring.decorated_jobs import DECORATED_ID

        declared = container.scheduler().recurring_jobs.get(DECORATED_ID)
        assert declared is not None and declared.target == "tests.recurring.decorated_jobs:hourly"
    finally:
        worker.stop()
        REGISTRY.remove("tests-decorated-every-hour")
        store.close()


def test_an_unimportable_recurring_module_fails_the_start(tmp_path: Path) -> None:
    container = build_container(
        f"sqlite:///{tmp_path / 'r.db'}", **{"recurring.modules": "tests.recurring.missing_mod"}
    )
    store = container.job_store()
    migrate(store)
    try:
        with pytest.raises(ConfigurationError, match="missing_mod"):
            container.worker().start()
    finally:
        store.close()
