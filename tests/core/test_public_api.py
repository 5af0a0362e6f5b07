"""The engine's scheduler and builder match the public protocols of ``ratchet_api`` that
applications type against, and ``ratchet_core`` exports what its docstring promises."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

import ratchet_core
from ratchet_api import JobBuilder, JobScheduler
from ratchet_core import RatchetContainer
from ratchet_core.builder import JobBuilder as CoreJobBuilder
from ratchet_core.scheduler import SchedulerService


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
    [(JobScheduler, SchedulerService), (JobBuilder, CoreJobBuilder)],
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
