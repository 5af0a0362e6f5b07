"""The override model: priorities, ties, conformance, the three registration ways, consumers."""

from __future__ import annotations

import importlib
import sys
import textwrap
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from dependency_injector import containers, providers

from ratchet_api import Priority
from ratchet_api.errors import AmbiguousAlternativeError, NonConformingAlternativeError
from ratchet_api.spi import ErrorSanitizer, RetryPolicy, SchedulerLifecycleHook
from ratchet_core.defaults.retry import DefaultRetryPolicy
from ratchet_core.runtime.alternatives import alternative
from ratchet_core.runtime.container import (
    RatchetContainer,
    RatchetDynamicContainer,
    create_container,
    find_ratchet_container,
)


class NeverRetry:
    def should_retry(self, attempt: int, cause: BaseException) -> bool:
        return False

    def get_delay(self, attempt: int) -> timedelta:
        return timedelta(0)


class AlwaysRetry(NeverRetry):
    def should_retry(self, attempt: int, cause: BaseException) -> bool:
        return True


class HalfARetryPolicy:
    """Lacks get_delay."""

    def should_retry(self, attempt: int, cause: BaseException) -> bool:
        return True


class RetryConsumer:
    def __init__(self, retry: RetryPolicy) -> None:
        self.retry = retry


class RecordingHook:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def before_start(self) -> None:
        self.calls.append("before_start")

    def after_start(self) -> None:
        pass

    def before_stop(self) -> None:
        pass

    def after_stop(self) -> None:
        pass


class OtherHook(RecordingHook):
    pass


@pytest.fixture
def container() -> RatchetDynamicContainer:
    # Entry points of installed distributions are not part of these unit tests.
    return create_container({"alternatives.entry_points": "false"})


def test_default_is_active_without_alternatives(container: RatchetDynamicContainer) -> None:
    container.build()
    assert type(container.retry_policy()) is DefaultRetryPolicy
    row = next(r for r in container.describe_spis() if r.spi == "RetryPolicy")
    assert (row.origin, row.priority) == ("default", 0)
    assert row.implementation == "ratchet_core.defaults.retry.DefaultRetryPolicy"


def test_application_alternative_beats_the_default(container: RatchetDynamicContainer) -> None:
    container.alternatives.register(
        RetryPolicy, providers.Singleton(NeverRetry), priority=Priority.APPLICATION
    )
    container.build()
    assert type(container.retry_policy()) is NeverRetry


def test_alternatives_apply_only_at_build_not_at_registration(
    container: RatchetDynamicContainer,
) -> None:
    container.alternatives.register(RetryPolicy, NeverRetry)
    assert not container.is_built
    assert type(container.retry_policy()) is DefaultRetryPolicy
    container.build()
    assert type(container.retry_policy()) is NeverRetry


def test_application_plus_100_beats_application_in_any_registration_order(
    container: RatchetDynamicContainer,
) -> None:
    container.alternatives.register(
        RetryPolicy, providers.Singleton(AlwaysRetry), priority=Priority.APPLICATION + 100
    )
    container.alternatives.register(
        RetryPolicy, providers.Singleton(NeverRetry), priority=Priority.APPLICATION
    )
    container.build()
    assert type(container.retry_policy()) is AlwaysRetry
    row = next(r for r in container.describe_spis() if r.spi == "RetryPolicy")
    assert row.priority == Priority.APPLICATION + 100
    assert row.implementation.endswith("AlwaysRetry")


def test_equal_top_priorities_fail_naming_both_candidates_and_the_spi(
    container: RatchetDynamicContainer,
) -> None:
    container.alternatives.register(RetryPolicy, NeverRetry, priority=Priority.APPLICATION)
    container.alternatives.register(RetryPolicy, AlwaysRetry, priority=Priority.APPLICATION)
    with pytest.raises(AmbiguousAlternativeError) as info:
        container.build()
    message = str(info.value)
    assert "RetryPolicy" in message
    assert "NeverRetry" in message and "AlwaysRetry" in message
    assert info.value.priority == Priority.APPLICATION


def test_a_tie_below_the_winner_is_not_an_error(container: RatchetDynamicContainer) -> None:
    container.alternatives.register(RetryPolicy, NeverRetry, priority=Priority.APPLICATION)
    container.alternatives.register(RetryPolicy, AlwaysRetry, priority=Priority.APPLICATION)
    container.alternatives.register(
        RetryPolicy, DefaultRetryPolicy, priority=Priority.APPLICATION + 1
    )
    container.build()
    assert type(container.retry_policy()) is DefaultRetryPolicy


def test_non_conforming_class_is_refused_naming_missing_members(
    container: RatchetDynamicContainer,
) -> None:
    with pytest.raises(NonConformingAlternativeError) as info:
        container.alternatives.register(RetryPolicy, HalfARetryPolicy)
    assert info.value.missing == ("get_delay",)
    assert "HalfARetryPolicy" in str(info.value) and "RetryPolicy" in str(info.value)


def test_non_conforming_instance_from_a_provider_is_refused(
    container: RatchetDynamicContainer,
) -> None:
    with pytest.raises(NonConformingAlternativeError, match="get_delay"):
        container.alternatives.register(RetryPolicy, providers.Object(HalfARetryPolicy()))


def test_instance_of_unknown_type_is_checked_when_first_provided(
    container: RatchetDynamicContainer,
) -> None:
    # No return annotation on purpose: what it produces is only known when called.
    def make_policy():  # type: ignore[no-untyped-def]
        return HalfARetryPolicy()

    container.alternatives.register(RetryPolicy, providers.Callable(make_policy))
    container.build()
    with pytest.raises(NonConformingAlternativeError, match="get_delay"):
        container.retry_policy()


def test_overriding_one_spi_changes_what_every_consumer_receives(
    container: RatchetDynamicContainer,
) -> None:
    container.consumer_a = providers.Factory(RetryConsumer, retry=container.retry_policy)
    container.consumer_b = providers.Singleton(RetryConsumer, retry=container.retry_policy)
    container.alternatives.register(RetryPolicy, NeverRetry)
    container.build()
    assert type(container.consumer_a().retry) is NeverRetry
    assert container.consumer_b().retry is container.consumer_a().retry  # one singleton
    # The engine's worker provider is wired to the same provider and sees it too.
    assert type(container.worker.kwargs["retry_policy"]()) is NeverRetry


def test_application_container_consumers_see_the_nested_override() -> None:
    class App(containers.DeclarativeContainer):
        ratchet = providers.Container(RatchetContainer)
        service = providers.Factory(RetryConsumer, retry=ratchet.retry_policy)

    app = App()
    nested = find_ratchet_container(app)
    nested.overrides.override({"alternatives.entry_points": "false"})
    nested.alternatives.register(RetryPolicy, NeverRetry)
    nested.build()
    assert type(app.service().retry) is NeverRetry


def test_build_twice_does_not_stack_overrides(container: RatchetDynamicContainer) -> None:
    container.alternatives.register(RetryPolicy, NeverRetry)
    container.build()
    container.build()
    assert len(container.retry_policy.overridden) == 1
    assert type(container.retry_policy()) is NeverRetry


def test_a_test_override_still_wins_over_an_alternative(
    container: RatchetDynamicContainer,
) -> None:
    container.alternatives.register(RetryPolicy, NeverRetry)
    container.build()
    fake = AlwaysRetry()
    with container.retry_policy.override(fake):
        assert container.retry_policy() is fake
    assert type(container.retry_policy()) is NeverRetry


def test_lifecycle_hooks_are_all_active_in_priority_order(
    container: RatchetDynamicContainer,
) -> None:
    container.alternatives.register(
        SchedulerLifecycleHook, OtherHook, priority=Priority.APPLICATION + 10
    )
    container.alternatives.register(
        SchedulerLifecycleHook, RecordingHook, priority=Priority.LIBRARY_AFTER
    )
    container.build()
    hooks = container.lifecycle_hooks()
    assert [type(h) for h in hooks] == [RecordingHook, OtherHook]
    rows = [r for r in container.describe_spis() if r.spi == "SchedulerLifecycleHook"]
    assert [r.priority for r in rows] == [Priority.LIBRARY_AFTER, Priority.APPLICATION + 10]


def test_class_alternative_gets_container_providers_injected_by_parameter_name(
    container: RatchetDynamicContainer,
) -> None:
    class SettingsAwareSanitizer:
        def __init__(self, settings: Any) -> None:
            self.settings = settings

        def sanitize(self, error: BaseException) -> str:
            return type(error).__name__

    container.alternatives.register(ErrorSanitizer, SettingsAwareSanitizer)
    container.build()
    assert container.error_sanitizer().settings is container.settings()


# ---------------------------------------------------------------- decorator modules


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith("ratchet_test_"):
            del sys.modules[name]


def _write_module(directory: Path, name: str, body: str) -> None:
    (directory / f"{name}.py").write_text(textwrap.dedent(body))
    importlib.invalidate_caches()


DECORATED_MODULE = """
    from datetime import timedelta

    from ratchet_api import Priority
    from ratchet_api.spi import RetryPolicy
    from ratchet_core.runtime.alternatives import alternative


    @alternative(RetryPolicy, priority=Priority.APPLICATION)
    class FixedFiveSeconds:
        def should_retry(self, attempt, cause):
            return attempt <= 5

        def get_delay(self, attempt):
            return timedelta(seconds=5)
"""


def test_decorated_class_in_a_configured_module_takes_effect(module_dir: Path) -> None:
    name = f"ratchet_test_alt_{uuid.uuid4().hex[:8]}"
    _write_module(module_dir, name, DECORATED_MODULE)
    container = create_container(
        {"alternatives.modules": name, "alternatives.entry_points": "false"}
    )
    container.build()
    policy = container.retry_policy()
    assert type(policy).__name__ == "FixedFiveSeconds"
    assert policy.get_delay(1) == timedelta(seconds=5)
    row = next(r for r in container.describe_spis() if r.spi == "RetryPolicy")
    assert row.origin == f"decorator module {name}"


def test_decorated_class_is_ignored_when_its_module_is_not_listed(module_dir: Path) -> None:
    name = f"ratchet_test_alt_{uuid.uuid4().hex[:8]}"
    _write_module(module_dir, name, DECORATED_MODULE)
    importlib.import_module(name)  # importing alone registers nothing
    container = create_container({"alternatives.entry_points": "false"})
    container.build()
    assert type(container.retry_policy()) is DefaultRetryPolicy


def test_unimportable_configured_module_is_a_deployment_error() -> None:
    from ratchet_api.errors import DeploymentError

    container = create_container(
        {"alternatives.modules": "no_such_module_xyz", "alternatives.entry_points": "false"}
    )
    with pytest.raises(DeploymentError, match="no_such_module_xyz"):
        container.build()


def test_alternative_decorator_refuses_unknown_scope() -> None:
    with pytest.raises(ValueError, match="scope"):
        alternative(RetryPolicy, scope="request")  # type: ignore[arg-type]


# ---------------------------------------------------------------- entry points


def _write_distribution(directory: Path, dist: str, entry_points: str) -> None:
    info = directory / f"{dist}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    importlib.invalidate_caches()


def test_entry_point_class_of_an_installed_distribution_takes_effect(module_dir: Path) -> None:
    name = f"ratchet_test_ep_{uuid.uuid4().hex[:8]}"
    _write_module(module_dir, name, DECORATED_MODULE)
    _write_distribution(
        module_dir,
        "acme_retry",
        f"""
        [ratchet.alternatives]
        retry = {name}:FixedFiveSeconds
        """,
    )
    container = create_container()
    container.build()
    assert type(container.retry_policy()).__name__ == "FixedFiveSeconds"
    row = next(r for r in container.describe_spis() if r.spi == "RetryPolicy")
    assert row.origin == "entry point acme_retry"


def test_entry_point_registration_function_takes_effect(module_dir: Path) -> None:
    name = f"ratchet_test_ep_{uuid.uuid4().hex[:8]}"
    _write_module(
        module_dir,
        name,
        """
        from ratchet_api import Priority
        from ratchet_api.spi import ErrorSanitizer


        class ShortSanitizer:
            def sanitize(self, error):
                return type(error).__name__


        def register(container):
            container.alternatives.register(
                ErrorSanitizer, ShortSanitizer, priority=Priority.LIBRARY_AFTER
            )
        """,
    )
    _write_distribution(
        module_dir,
        "acme_sanitizer",
        f"""
        [ratchet.alternatives]
        sanitizer = {name}:register
        """,
    )
    container = create_container()
    container.build()
    assert container.error_sanitizer().sanitize(ValueError("password=x")) == "ValueError"
    row = next(r for r in container.describe_spis() if r.spi == "ErrorSanitizer")
    assert (row.origin, row.priority) == ("entry point acme_sanitizer", Priority.LIBRARY_AFTER)
    # The explicit registration made inside the function is not kept as "explicit": a rebuild
    # rediscovers it once, it does not accumulate.
    container.build()
    assert sum(1 for a in container.alternatives if a.spi is ErrorSanitizer) == 1


def test_entry_points_can_be_switched_off(module_dir: Path) -> None:
    name = f"ratchet_test_ep_{uuid.uuid4().hex[:8]}"
    _write_module(module_dir, name, DECORATED_MODULE)
    _write_distribution(
        module_dir, "acme_off", f"[ratchet.alternatives]\nretry = {name}:FixedFiveSeconds\n"
    )
    container = create_container({"alternatives.entry_points": "no"})
    container.build()
    assert type(container.retry_policy()) is DefaultRetryPolicy
