"""System checks (``manage.py check``, run before ``runserver`` and ``migrate``).

=============== ==========================================================================
``ratchet.E001`` ``settings.RATCHET`` is malformed or a value does not parse
``ratchet.E002`` the store cannot be opened: unknown URL scheme, store distribution or
                 database driver not installed, a Django database Ratchet cannot share
``ratchet.E003`` the alternatives cannot be deployed: two share the highest priority for an
                 SPI, or one does not implement its SPI
``ratchet.E004`` ``settings.RATCHET_CONTAINER`` cannot be imported or holds no Ratchet container
``ratchet.E010`` a Ratchet task backend without Ratchet's app in ``INSTALLED_APPS``
``ratchet.E011`` the ClassPolicy refuses the task backend's job target
``ratchet.W001`` ``settings.RATCHET`` names a key Ratchet does not know (a typo?)
=============== ==========================================================================
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from django.core import checks

from ratchet_api.errors import ConfigurationError, DeploymentError, RatchetError, StoreError

_KEY_MODULES = (
    "ratchet_core.runtime.stores",
    "ratchet_core.enqueue.scheduler",
    "ratchet_core.worker",
    "ratchet_core.cluster.coordination",
    "ratchet_core.observability.metrics",
    "ratchet_core.worker.retry",
    "ratchet_core.defaults.resilience",
    "ratchet_core.payload.encryption",
    "ratchet_core.defaults.security",
    "ratchet_core.defaults.execution",
    "ratchet_core.defaults.cluster",
    "ratchet_core.defaults.logging",
)


def _known_keys() -> tuple[set[str], tuple[str, ...]]:
    from ratchet_core.runtime.config import KEYS, PATTERN_KEYS

    for module in _KEY_MODULES:
        try:
            importlib.import_module(module)
        except ImportError:
            continue  # an optional part that is not installed registers no key
    prefixes = tuple(pattern.split("<", 1)[0] for pattern in PATTERN_KEYS)
    return set(KEYS), prefixes


def _error(
    message: str, check_id: str, hint: str | None = None, obj: str = "settings.RATCHET"
) -> Any:
    return checks.Error(message, hint=hint, obj=obj, id=check_id)


@checks.register("ratchet")
def check_ratchet_settings(
    app_configs: Sequence[Any] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Build the Ratchet container and open its store; report what fails with a Ratchet id."""
    from ratchet_core.contrib.django import app_config
    from ratchet_core.contrib.django.conf import DjangoSettingsSource, ratchet_settings
    from ratchet_core.runtime.config import KEYS

    messages: list[checks.CheckMessage] = []
    try:
        values = DjangoSettingsSource(ratchet_settings()).values
    except ConfigurationError as exc:
        return [_error(str(exc), "ratchet.E001")]
    known, prefixes = _known_keys()
    for name in sorted(values):
        if name not in known and not name.startswith(prefixes):
            messages.append(
                checks.Warning(
                    f"settings.RATCHET names the unknown key {name!r}",
                    hint="see docs/configuration.md for every key (`ratchet config`)",
                    obj="settings.RATCHET",
                    id="ratchet.W001",
                )
            )
    try:
        container = app_config().container()
    except DeploymentError as exc:
        return [*messages, _error(str(exc), "ratchet.E003", obj="Ratchet alternatives")]
    except ImportError as exc:
        return [*messages, _error(str(exc), "ratchet.E004", obj="settings.RATCHET_CONTAINER")]
    except LookupError as exc:
        return [*messages, _error(str(exc), "ratchet.E004", obj="settings.RATCHET_CONTAINER")]
    except ConfigurationError as exc:
        check_id = "ratchet.E002" if exc.key == "store.url" else "ratchet.E001"
        return [*messages, _error(str(exc), check_id)]
    except RatchetError as exc:
        return [*messages, _error(str(exc), "ratchet.E001")]
    config = container.settings()
    for name in sorted(values):
        key = KEYS.get(name)
        if key is None:
            continue
        try:
            config.get(key)
        except ConfigurationError as exc:
            messages.append(_error(str(exc), "ratchet.E001"))
    try:
        container.job_store()
    except ConfigurationError as exc:
        messages.append(
            _error(
                str(exc),
                "ratchet.E002",
                hint="set RATCHET['store']['url'] to sqlite:///..., postgresql+psycopg://..., "
                "mysql+pymysql://... or mongodb://... and install the matching store",
            )
        )
    except (StoreError, ImportError) as exc:
        messages.append(
            _error(
                f"cannot open the Ratchet store: {exc}",
                "ratchet.E002",
                hint="install the database driver named above (for example "
                "ratchet-store-sql[postgresql] for psycopg)",
            )
        )
    except DeploymentError as exc:
        messages.append(_error(str(exc), "ratchet.E003", obj="Ratchet alternatives"))
    return messages


def task_backend_messages(backend: Any) -> list[checks.CheckMessage]:
    """Checks of one ``RatchetTaskBackend`` (called from its ``check()``)."""
    from ratchet_core.contrib.django import get_container
    from ratchet_core.contrib.django.conf import CONTRIB_PACKAGE

    target = f"{CONTRIB_PACKAGE}.tasks.execute_django_task"
    try:
        policy = get_container().class_policy()
    except (RatchetError, ImportError, LookupError):
        return []  # check_ratchet_settings reports the configuration error itself
    if policy.is_allowed(target):
        return []
    return [
        _error(
            f"the ClassPolicy refuses {target}, the job target of every Django task",
            "ratchet.E011",
            hint=f"add {CONTRIB_PACKAGE!r} to RATCHET['security']['allowed_packages']",
            obj=f"TASKS[{backend.alias!r}]",
        )
    ]


__all__ = ["check_ratchet_settings", "task_backend_messages"]
