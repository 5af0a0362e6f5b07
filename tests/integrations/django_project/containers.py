"""The project's own dependency-injector container: it nests Ratchet's and overrides one SPI
with priority APPLICATION (shown by ``manage.py ratchet_spi``)."""

from __future__ import annotations

from dependency_injector import containers, providers

from ratchet_api.priority import Priority
from ratchet_api.spi import RetryPolicy
from ratchet_core.defaults.retry import DefaultRetryPolicy
from ratchet_core.runtime.container import RatchetContainer, find_ratchet_container


class ProjectRetryPolicy(DefaultRetryPolicy):
    """The project's retry policy (behaves like the default; its presence is what is tested)."""


class ProjectContainer(containers.DeclarativeContainer):
    ratchet = providers.Container(RatchetContainer)


def create_container() -> ProjectContainer:
    container = ProjectContainer()
    ratchet = find_ratchet_container(container)
    ratchet.alternatives.register(
        RetryPolicy, providers.Singleton(ProjectRetryPolicy), priority=Priority.APPLICATION
    )
    return container
