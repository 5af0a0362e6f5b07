"""Recurring jobs declared in code (the ``@recurring`` decorator) or in configuration (key
``recurring``), created or updated when a worker starts.

::

    from ratchet_core.features import recurring

    @recurring("0 3 * * *", tz="Europe/Berlin", max_retries=5)
    def nightly_report() -> None: ...

The decorator validates the schedule and options at import time and returns the function
unchanged (it can still be enqueued as a normal job). Its id defaults to the function's
``module.qualname``. The worker declares every decorated function of the modules imported by
then, which is why job modules are imported before ``worker.start()`` (the CLI and the Flask
and Django integrations import them).
"""

from __future__ import annotations

import importlib
import json
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import attrs

from ratchet_api.errors import ConfigurationError, InvalidJobError, RatchetError
from ratchet_api.spi.runtime import RatchetConfig
from ratchet_api.store.entities import RecurringJobEntity
from ratchet_core.features.recurring.schedule import parse_schedule
from ratchet_core.features.recurring.service import (
    OPTION_NAMES,
    RecurringOptions,
    RecurringService,
    check_recurring_id,
    schedule_expression,
)
from ratchet_core.features.recurring.settings import DEFINITIONS

F = TypeVar("F", bound=Callable[..., Any])


@attrs.frozen(kw_only=True)
class Declaration:
    recurring_id: str
    cron: str | timedelta | None
    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = attrs.field(factory=dict)
    every: timedelta | None = None
    options: RecurringOptions = attrs.field(factory=RecurringOptions)

    def apply(self, service: RecurringService) -> RecurringJobEntity:
        definition, schedule = service.prepare(
            self.recurring_id,
            self.cron,
            self.fn,
            self.args,
            self.kwargs,
            every=self.every,
            options=self.options,
        )
        return service.save(definition, schedule)


class DeclarationRegistry:
    """Decorated declarations by id. Thread safe; re-decorating an id replaces it (a module
    imported again)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, Declaration] = {}

    def add(self, declaration: Declaration) -> None:
        with self._lock:
            self._items[declaration.recurring_id] = declaration

    def remove(self, recurring_id: str) -> None:
        with self._lock:
            self._items.pop(recurring_id, None)

    def all(self) -> list[Declaration]:
        with self._lock:
            return list(self._items.values())


REGISTRY = DeclarationRegistry()
"""Where ``@recurring`` records its declarations."""


def _check(
    cron: str | timedelta | None, every: timedelta | None, options: dict[str, Any]
) -> RecurringOptions:
    unknown = sorted(set(options) - OPTION_NAMES)
    if unknown:
        raise InvalidJobError(
            f"unknown recurring option(s) {', '.join(map(repr, unknown))}; use "
            f"{', '.join(sorted(OPTION_NAMES))}"
        )
    opts = RecurringOptions.of(**options)
    parse_schedule(schedule_expression(cron, every), opts.tz)
    return opts


def recurring(
    cron: str | timedelta | None = None,
    /,
    *,
    id: str | None = None,
    every: timedelta | None = None,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    registry: DeclarationRegistry | None = None,
    **options: Any,
) -> Callable[[F], F]:
    """Declare ``fn`` as a recurring job, created or updated when a worker starts.

    ``cron`` is a cron expression (5 fields, or 6 with seconds first, or an alias such as
    ``@daily``) or a ``timedelta``; ``every=timedelta(...)`` is the same as the latter.
    ``options``: ``tz``, ``misfire``, ``priority``, ``tags``, ``max_retries``, ``backoff``,
    ``execution_target``, ``max_instances``. Raises ``InvalidScheduleError`` /
    ``InvalidJobError`` at decoration for a bad schedule, zone or option."""
    opts = _check(cron, every, options)

    def decorate(fn: F) -> F:
        if not callable(fn):
            raise InvalidJobError(f"@recurring decorates a function, got {fn!r}")
        recurring_id = check_recurring_id(
            id if id is not None else f"{fn.__module__}.{fn.__qualname__}"
        )
        (registry or REGISTRY).add(
            Declaration(
                recurring_id=recurring_id,
                cron=cron,
                fn=fn,
                args=tuple(args),
                kwargs=dict(kwargs or {}),
                every=every,
                options=opts,
            )
        )
        return fn

    return decorate


def _import_target(path: Any, where: str) -> Callable[..., Any]:
    if not isinstance(path, str) or ":" not in path:
        raise ConfigurationError(
            "recurring", f"{where}: target must be 'module:function', got {path!r}"
        )
    module_name, _, qualname = path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(
            "recurring", f"{where}: cannot import target {path!r}: {exc}"
        ) from exc
    if not callable(obj):
        raise ConfigurationError("recurring", f"{where}: target {path!r} is not callable")
    return obj  # type: ignore[no-any-return]


def _seconds(value: Any, where: str, field: str) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return timedelta(seconds=value)
    raise ConfigurationError(
        "recurring", f"{where}: {field} must be a number of seconds, got {value!r}"
    )


def from_config(config: RatchetConfig) -> list[Declaration]:
    """The declarations of configuration key ``recurring`` (a JSON list of objects);
    ``ConfigurationError`` naming the entry for anything malformed."""
    raw = config.get(DEFINITIONS)
    if not raw.strip():
        return []
    try:
        items = json.loads(raw)
    except ValueError as exc:
        raise ConfigurationError("recurring", f"not a JSON list of tables: {exc}") from exc
    if isinstance(items, dict):
        items = [items]
    if not isinstance(items, list):
        raise ConfigurationError(
            "recurring", f"expected a list of tables, got {type(items).__name__}"
        )
    out: list[Declaration] = []
    for index, entry in enumerate(items):
        where = f"entry {index}"
        if not isinstance(entry, dict):
            raise ConfigurationError("recurring", f"{where} must be a table, got {entry!r}")
        item = dict(entry)
        where = f"entry {index} ({item.get('id', '?')})"
        try:
            recurring_id = check_recurring_id(item.pop("id", None))
            fn = _import_target(item.pop("target", None), where)
            cron = item.pop("cron", None)
            every_raw = item.pop("every", None)
            every = None if every_raw is None else _seconds(every_raw, where, "every")
            args = item.pop("args", [])
            kwargs = item.pop("kwargs", {})
            if not isinstance(args, list) or not isinstance(kwargs, dict):
                raise ConfigurationError(
                    "recurring", f"{where}: args must be a list, kwargs a table"
                )
            if "backoff" in item and item["backoff"] is not None:
                item["backoff"] = _seconds(item["backoff"], where, "backoff")
            opts = _check(cron, every, item)
        except ConfigurationError:
            raise
        except RatchetError as exc:
            raise ConfigurationError("recurring", f"{where}: {exc}") from exc
        out.append(
            Declaration(
                recurring_id=recurring_id,
                cron=cron,
                fn=fn,
                args=tuple(args),
                kwargs=kwargs,
                every=every,
                options=opts,
            )
        )
    return out


def declare_all(
    service: RecurringService,
    config: RatchetConfig,
    registry: DeclarationRegistry | None = None,
) -> list[RecurringJobEntity]:
    """Create or update every decorated and configured definition (configuration wins for an
    id declared in both). Raises on the first invalid one, naming it."""
    declarations = {d.recurring_id: d for d in (registry or REGISTRY).all()}
    declarations.update({d.recurring_id: d for d in from_config(config)})
    stored = []
    for declaration in declarations.values():
        try:
            stored.append(declaration.apply(service))
        except InvalidJobError as exc:
            raise type(exc)(f"recurring job {declaration.recurring_id!r}: {exc}") from exc
    return stored


__all__ = [
    "REGISTRY",
    "Declaration",
    "DeclarationRegistry",
    "declare_all",
    "from_config",
    "recurring",
]
