"""The container-backed BeanResolver."""

from __future__ import annotations

import pytest
from dependency_injector import containers, providers

from ratchet_core.defaults.beans import ContainerBeanResolver
from ratchet_core.runtime.container import RatchetContainer, find_ratchet_container


class Mailer:
    closed = 0

    def close(self) -> None:
        type(self).closed += 1


class SmtpMailer(Mailer):
    pass


class Billing:
    def __init__(self, mailer: Mailer) -> None:
        self.mailer = mailer


class Unknown:
    pass


class App(containers.DeclarativeContainer):
    ratchet = providers.Container(RatchetContainer)
    mailer = providers.Singleton(SmtpMailer)
    billing = providers.Factory(Billing, mailer=mailer)


@pytest.fixture
def resolver() -> ContainerBeanResolver:
    nested = find_ratchet_container(App())
    nested.overrides.override({"alternatives.entry_points": "false"})
    nested.build()
    resolver = nested.bean_resolver()
    assert isinstance(resolver, ContainerBeanResolver)
    return resolver


def test_resolves_a_class_from_the_application_container(resolver: ContainerBeanResolver) -> None:
    billing = resolver.resolve(Billing)
    assert isinstance(billing, Billing)
    assert isinstance(billing.mailer, SmtpMailer)


def test_resolves_a_base_class_through_a_subclass_provider(resolver: ContainerBeanResolver) -> None:
    assert type(resolver.resolve(Mailer)) is SmtpMailer
    assert resolver.resolve(Mailer) is resolver.resolve(SmtpMailer)


def test_unknown_class_fails_at_validation_naming_it(resolver: ContainerBeanResolver) -> None:
    with pytest.raises(LookupError, match=r"test_beans\.Unknown"):
        resolver.validate_resolvable(Unknown)


def test_acquire_releases_factory_instances_and_keeps_singletons(
    resolver: ContainerBeanResolver,
) -> None:
    class Closing(Billing):
        def __init__(self, mailer: Mailer) -> None:
            super().__init__(mailer)
            self.closed = False

        def close(self) -> None:
            self.closed = True

    app = App()
    app.closing = providers.Factory(Closing, mailer=app.mailer)
    nested = find_ratchet_container(app)
    local = ContainerBeanResolver(nested)
    with local.acquire(Closing) as handle:
        instance = handle.instance
        assert handle.dependent
    assert instance.closed
    before = Mailer.closed
    with local.acquire(SmtpMailer) as handle:
        assert not handle.dependent
    assert Mailer.closed == before


def test_engine_singletons_resolve_from_the_ratchet_container(
    resolver: ContainerBeanResolver,
) -> None:
    from ratchet_core.defaults.security import DefaultErrorSanitizer

    assert isinstance(resolver.resolve(DefaultErrorSanitizer), DefaultErrorSanitizer)
