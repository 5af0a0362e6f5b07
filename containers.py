"""The reference composition root: how an application assembles Ratchet.

* ``ApplicationContainer`` nests the Ratchet container (``ratchet``) and gives it the
  application's database URL (``DATABASE_URL``; without it Ratchet's own configuration applies:
  ``RATCHET_STORE_URL``, ``ratchet.toml``, default ``sqlite:///ratchet.db``).
* ``create_container()`` builds it and registers one alternative at ``Priority.APPLICATION``:
  an ``ErrorSanitizer`` that also hides card numbers. Check it with::

      ratchet --app containers:create_container spi

Application services that job methods live on are declared here too, so the ``BeanResolver``
can provide them to the worker.
"""

from __future__ import annotations

import re
from typing import Any

from dependency_injector import containers, providers

from ratchet_api import Priority
from ratchet_api.spi import ErrorSanitizer
from ratchet_core.defaults.security import DefaultErrorSanitizer
from ratchet_core.runtime.container import (
    RatchetContainer,
    RatchetDynamicContainer,
    find_ratchet_container,
)

_CARD_NUMBER = re.compile(r"\b(?:\d[ -]?){12,18}\d\b")


class CardRedactingErrorSanitizer:
    """The default sanitizer plus redaction of card-number-like digit runs (13-19 digits)."""

    def __init__(self, max_length: int = 2000) -> None:
        self._default = DefaultErrorSanitizer(max_length)

    def sanitize(self, error: BaseException) -> str:
        return _CARD_NUMBER.sub("****", self._default.sanitize(error))


def ratchet_settings(database_url: str | None) -> dict[str, Any]:
    """Ratchet's explicit configuration derived from the application's own settings."""
    return {"store.url": database_url} if database_url else {}


class ApplicationContainer(containers.DeclarativeContainer):
    """The application's container: its configuration, Ratchet, its services."""

    config = providers.Configuration()

    ratchet = providers.Container(
        RatchetContainer,
        overrides=providers.Callable(ratchet_settings, database_url=config.database_url),
    )


def create_container(database_url: str | None = None) -> ApplicationContainer:
    """The application container, with its Ratchet alternatives registered (not yet built:
    ``ratchet_container(app).build()`` or any ``ratchet`` command builds it)."""
    app = ApplicationContainer()
    app.config.database_url.from_env("DATABASE_URL", default=None)
    if database_url is not None:
        app.config.database_url.from_value(database_url)
    ratchet_container(app).alternatives.register(
        ErrorSanitizer,
        providers.Singleton(CardRedactingErrorSanitizer),
        priority=Priority.APPLICATION,
    )
    return app


def ratchet_container(app: ApplicationContainer) -> RatchetDynamicContainer:
    """The nested Ratchet container of ``app``."""
    return find_ratchet_container(app)


__all__ = [
    "ApplicationContainer",
    "CardRedactingErrorSanitizer",
    "create_container",
    "ratchet_container",
    "ratchet_settings",
]
