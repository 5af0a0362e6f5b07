"""The engine's scheduler and builder match the public protocols of ``ratchet_api`` that
applications type against, and ``ratchet_core`` exports what its docstring promises."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ratchet_core
from ratchet_api import JobBuilder, JobScheduler
from ratchet_core import RatchetContainer
from ratchet_core.enqueue.builder import DefaultJobBuilder
from ratchet_core.enqueue.scheduler import SchedulerService


def send_nothing() -> None:
    """A job target for the builder."""


def _members(protocol: type[Any]) -> list[str]:
    return sorted(
        name
        for name, value in vars(protocol).items()
        if not name.startswith("_") and inspect.isfunction(value)
    )


def _parameters(fn: Any) -> list[tuple[str, Any]]:
    return [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize(
    ("protocol", "implementation"),
    [(JobScheduler, SchedulerService), (JobBuilder, DefaultJobBuilder)],
    ids=["JobScheduler", "JobBuilder"],
)
def test_engine_methods_take_the_parameters_the_protocol_declares(
    protocol: type[Any], implementation: type[Any]
) -> None:
    members = _members(protocol)
    assert {"enqueue"} <= set(members)
    for name in members:
        assert hasattr(implementation, name), f"{implementation.__name__} lacks {name}"
        assert _parameters(getattr(implementation, name)) == _parameters(getattr(protocol, name)), (
            f"{implementation.__name__}.{name} differs from {protocol.__name__}.{name}"
        )


def test_container_scheduler_and_its_builder_satisfy_the_api_protocols(tmp_path: Path) -> None:
    container = RatchetContainer(overrides={"store.url": f"sqlite:///{tmp_path / 'api.db'}"})
    scheduler = container.scheduler()
    assert isinstance(scheduler, JobScheduler)
    assert isinstance(scheduler.job(send_nothing), JobBuilder)
    container.job_store().close()


def test_every_name_ratchet_core_exports_is_importable() -> None:
    for name in ratchet_core.__all__:
        assert getattr(ratchet_core, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        ratchet_core.Nope  # noqa: B018


def _public_classes(package_name: str) -> Iterator[tuple[str, str]]:
    package = importlib.import_module(package_name)
    names = [package_name] + [
        info.name
        for info in pkgutil.walk_packages(package.__path__, f"{package_name}.")
        # Alembic scripts run only inside a migration; Django's modules need configured settings
        # (and its management commands must all be called ``Command``).
        if ".migrations" not in info.name and ".contrib.django" not in info.name
    ]
    for name in names:
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if inspect.isclass(value) and value.__module__ == name and not attr.startswith("_"):
                yield attr, f"{name}.{value.__qualname__}"


def test_no_two_public_classes_share_a_name_across_the_distributions() -> None:
    owners: dict[str, set[str]] = {}
    for package_name in (
        "ratchet_api",
        "ratchet_core",
        "ratchet_store_sql",
        "ratchet_store_mongo",
        "ratchet_tck",
    ):
        for attr, where in _public_classes(package_name):
            owners.setdefault(attr, set()).add(where)
    shared = {name: sorted(where) for name, where in owners.items() if len(where) > 1}
    assert not shared, f"classes sharing a name (STYLE: never two classes with one name): {shared}"
