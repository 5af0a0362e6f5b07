"""The Flask app's container: nests Ratchet's and overrides the ErrorSanitizer (APPLICATION)."""

from __future__ import annotations

from dependency_injector import containers, providers

from ratchet_api.priority import Priority
from ratchet_api.spi import ErrorSanitizer
from ratchet_core.defaults.security import DefaultErrorSanitizer
from ratchet_core.runtime.container import RatchetContainer, find_ratchet_container


class ShopErrorSanitizer(DefaultErrorSanitizer):
    """The app's sanitizer (behaves like the default; its activation is what is tested)."""


class AppContainer(containers.DeclarativeContainer):
    ratchet = providers.Container(RatchetContainer)


def create_container() -> AppContainer:
    container = AppContainer()
    ratchet = find_ratchet_container(container)
    ratchet.alternatives.register(
        ErrorSanitizer, providers.Singleton(ShopErrorSanitizer), priority=Priority.APPLICATION
    )
    return container
