"""What a worker does about recurring jobs when it starts: declare the decorated and
configured definitions, then run a :class:`RecurringSweeper` next to its other maintenance."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

from ratchet_api.errors import ConfigurationError
from ratchet_api.spi.runtime import MetricsCollector, RatchetConfig
from ratchet_api.store.protocols import JobStore, RecurringJobStore
from ratchet_core.features.recurring.declarations import REGISTRY, declare_all, from_config
from ratchet_core.features.recurring.settings import MODULES, RecurringSettings
from ratchet_core.features.recurring.sweeper import MetricsHook, RecurringSweeper

_log = logging.getLogger("ratchet.recurring")


def metrics_hook(metrics: MetricsCollector | None) -> MetricsHook | None:
    """The collector's optional ``recurring_slots(recurring_id, outcome, count)`` callback
    (collectors written before recurring jobs existed simply do not have it)."""
    hook = getattr(metrics, "recurring_slots", None) if metrics is not None else None
    return hook if callable(hook) else None


def import_modules(names: tuple[str, ...]) -> None:
    """Import the modules of ``recurring.modules`` (their ``@recurring`` functions register);
    ``ConfigurationError`` names a module that cannot be imported."""
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ConfigurationError(MODULES.name, f"cannot import module {name!r}: {exc}") from exc


def start_recurring(
    store: JobStore,
    config: RatchetConfig,
    scheduler: Any,
    *,
    on_fired: Callable[[], None] | None = None,
    metrics: MetricsCollector | None = None,
) -> RecurringSweeper | None:
    """Declare the definitions (through ``scheduler.recurring_jobs`` when a scheduler is
    given; an invalid one raises here, aborting the worker's start) and return the sweeper to
    run, or None when ``recurring.enabled`` is false or the store lacks the capability."""
    settings = RecurringSettings.from_config(config)
    import_modules(config.get(MODULES))
    if store.capability(RecurringJobStore) is None:
        if REGISTRY.all() or from_config(config):
            _log.warning(
                "%s lacks the RecurringJobStore capability: recurring jobs are not fired",
                type(store).__name__,
            )
        return None
    service = getattr(scheduler, "recurring_jobs", None)
    if service is not None:
        declare_all(service, config)
    if not settings.enabled:
        return None
    return RecurringSweeper(
        store,
        settings,
        on_fired=on_fired,
        metrics=metrics_hook(metrics),
        pipeline=getattr(scheduler, "pipeline", None),  # fired jobs sealed as every job is
    )


__all__ = ["import_modules", "metrics_hook", "start_recurring"]
