"""Framework integrations: Flask (:mod:`ratchet_core.contrib.flask`), Django
(:mod:`ratchet_core.contrib.django`, an installable app) and FastAPI/ASGI
(:mod:`ratchet_core.contrib.fastapi`). Each is imported only by applications that use it; the
frameworks are extras of ``ratchet-core`` (``ratchet-core[flask]``, ``[django]``, ``[fastapi]``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from dependency_injector import providers

from ratchet_api.errors import ConfigurationError
from ratchet_api.spi.runtime import RatchetConfigSource
from ratchet_core.runtime.container import RatchetDynamicContainer


def flatten_settings(values: Mapping[str, Any], setting: str) -> dict[str, Any]:
    """A framework's nested or dotted settings as dotted key names.

    ``{"store": {"url": "x"}, "worker.concurrency": 4}`` becomes
    ``{"store.url": "x", "worker.concurrency": 4}``. ``setting`` names the framework setting in
    the ``ConfigurationError`` raised for a non-string key or a key given twice.
    """

    def walk(table: Mapping[Any, Any], prefix: str) -> Iterator[tuple[str, Any]]:
        for key, value in table.items():
            if not isinstance(key, str) or not key.strip():
                raise ConfigurationError(
                    setting, f"keys must be non-empty strings, got {key!r} under {prefix!r}"
                )
            name = f"{prefix}{key.strip().lower()}"
            if isinstance(value, Mapping):
                yield from walk(value, name + ".")
            else:
                yield name, value

    flat: dict[str, Any] = {}
    for name, value in walk(values, ""):
        if name in flat:
            raise ConfigurationError(setting, f"key {name!r} is given twice")
        flat[name] = value
    return flat


def new_ratchet_container(**kwargs: Any) -> RatchetDynamicContainer:
    """A new ``RatchetContainer`` instance (typed as the dynamic container it is)."""
    from ratchet_core.runtime.container import RatchetContainer

    container: Any = RatchetContainer(**kwargs)
    assert isinstance(container, RatchetDynamicContainer)
    return container


def insert_config_source(
    container: RatchetDynamicContainer, source: RatchetConfigSource, *, position: int = 1
) -> providers.Object[RatchetConfigSource]:
    """Put ``source`` into the container's configuration chain at ``position`` (0 is the highest
    precedence; the default 1 places it right after the explicit ``overrides`` dict, before the
    environment and the TOML file). Resets an already created ``settings`` singleton so that the
    next lookup sees the new chain. Returns the provider inserted (for
    :func:`remove_config_source`)."""
    chain: Any = container.config_sources
    current = list(chain.args)
    provider = providers.Object(source)
    current.insert(position, provider)
    chain.set_args(*current)
    settings: Any = container.settings
    settings.reset()
    return provider


def remove_config_source(
    container: RatchetDynamicContainer, provider: providers.Provider[Any]
) -> None:
    """Take a source put in by :func:`insert_config_source` out of the chain again (nothing when
    it is not there) and reset the ``settings`` singleton."""
    chain: Any = container.config_sources
    current = [p for p in chain.args if p is not provider]
    if len(current) != len(chain.args):
        chain.set_args(*current)
        settings: Any = container.settings
        settings.reset()


__all__ = [
    "flatten_settings",
    "insert_config_source",
    "new_ratchet_container",
    "remove_config_source",
]
