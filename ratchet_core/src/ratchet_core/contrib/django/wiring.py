"""Builds the project's Ratchet container from Django settings."""

from __future__ import annotations

from typing import Any

from dependency_injector import containers, providers
from django.conf import settings
from django.db import connections
from django.utils.module_loading import import_string

from ratchet_api.errors import ConfigurationError
from ratchet_api.priority import Priority
from ratchet_api.spi.runtime import AfterCommitRegistrar
from ratchet_core.contrib import new_ratchet_container
from ratchet_core.contrib.django.conf import (
    CONTAINER_SETTING,
    DATABASE,
    DjangoDatabaseSource,
    DjangoSettingsSource,
    database_url,
    ratchet_settings,
)
from ratchet_core.runtime.config import STORE_URL
from ratchet_core.runtime.container import (
    RatchetDynamicContainer,
    find_ratchet_container,
    lazy,
)

ORIGIN = "ratchet Django integration"
WIRE_SETTING = "RATCHET_WIRE"
_WIRED = "_ratchet_django_wiring"


def fingerprint() -> object:
    """What the container depends on: ``RATCHET``, ``RATCHET_CONTAINER`` and the connection
    settings of every database (the test runner renames them)."""
    databases = tuple(
        (alias, connections[alias].settings_dict.get("NAME")) for alias in connections
    )
    return (
        repr(getattr(settings, "RATCHET", None)),
        repr(getattr(settings, CONTAINER_SETTING, None)),
        repr(getattr(settings, WIRE_SETTING, None)),
        databases,
    )


def load_application_container() -> Any:
    """The object named by ``settings.RATCHET_CONTAINER`` (a container instance, a container
    class, or a zero-argument factory), or None."""
    spec = getattr(settings, CONTAINER_SETTING, None)
    if spec is None:
        return None
    obj = import_string(spec) if isinstance(spec, str) else spec
    if isinstance(obj, type) and issubclass(obj, containers.DeclarativeContainer):
        return obj()
    if callable(obj) and not isinstance(obj, containers.Container):
        return obj()
    return obj


def build_container() -> tuple[RatchetDynamicContainer, bool, Any]:
    """The Ratchet container (the application's nested one, or a new ``RatchetContainer``)
    configured from Django settings, with ``transaction.on_commit`` as after-commit registrar,
    built (alternatives applied). Returns it, whether enqueue can join Django transactions
    (the store lives in the Django database it follows) and the application's container (the
    Ratchet container itself without ``RATCHET_CONTAINER``), wired to ``RATCHET_WIRE``."""
    source = DjangoSettingsSource(ratchet_settings())
    app_container = load_application_container()
    ratchet = (
        find_ratchet_container(app_container)
        if app_container is not None
        else new_ratchet_container()
    )
    wiring: dict[str, Any] = ratchet.__dict__.setdefault(_WIRED, {})
    if wiring:
        # A container instance reused across rebuilds (override_settings): forget instances
        # created from the previous settings.
        ratchet.reset_singletons()
    chain: Any = ratchet.config_sources
    settings_singleton: Any = ratchet.settings
    args = [a for a in chain.args if id(a) not in wiring.get("sources", ())]
    settings_provider = providers.Object(source)
    args.insert(1, settings_provider)
    chain.set_args(*args)
    settings_singleton.reset()

    config = ratchet.settings()
    alias = config.get(DATABASE)
    if alias not in connections:
        raise ConfigurationError(
            DATABASE.name,
            f"no database {alias!r} in DATABASES (known: {', '.join(connections)})",
        )
    url: str | None
    error: ConfigurationError | None = None
    try:
        url = database_url(connections[alias].settings_dict, alias)
    except ConfigurationError as exc:
        url, error = None, exc
    database_provider = providers.Object(DjangoDatabaseSource(alias, url, error))
    chain.add_args(database_provider)
    settings_singleton.reset()
    wiring["sources"] = (id(settings_provider), id(database_provider))
    wiring["alias"] = alias

    if not wiring.get("registrar"):
        ratchet.alternatives.register(
            AfterCommitRegistrar,
            providers.Singleton(
                lazy("ratchet_core.contrib.django.transactions.DjangoAfterCommitRegistrar"),
                fallback=providers.Singleton(
                    lazy("ratchet_core.defaults.transactions.DefaultAfterCommitRegistrar")
                ),
                default_alias=providers.Object(lambda: wiring["alias"]),
            ),
            priority=Priority.LIBRARY_AFTER,
            name="ratchet_core.contrib.django.transactions.DjangoAfterCommitRegistrar",
            origin=ORIGIN,
        )
        wiring["registrar"] = True
    ratchet.build()
    settings_now = ratchet.settings()
    joinable = url is not None and settings_now.get(STORE_URL) == url
    project = app_container if app_container is not None else ratchet
    modules = wired_modules()
    if modules:
        project.wire(modules=modules)
    return ratchet, joinable, project


def wired_modules() -> list[str]:
    """``settings.RATCHET_WIRE``: modules (views) whose ``@inject`` functions get the project
    container's ``Provide[...]`` markers; ``ConfigurationError`` for anything but names."""
    value = getattr(settings, WIRE_SETTING, None) or []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(i, str) for i in items):
        raise ConfigurationError(WIRE_SETTING, "must be a list of module names")
    return list(items)


__all__ = [
    "ORIGIN",
    "WIRE_SETTING",
    "build_container",
    "fingerprint",
    "load_application_container",
    "wired_modules",
]
