"""Configuration keys of recurring jobs."""

from __future__ import annotations

from datetime import timedelta

import attrs

from ratchet_api.spi.runtime import RatchetConfig, RatchetConfigKey
from ratchet_core.runtime.config import (
    parse_bool,
    parse_duration,
    parse_int,
    parse_str,
    parse_str_list,
    register_key,
)

ENABLED = register_key(
    RatchetConfigKey(
        "recurring.enabled",
        parse_bool,
        True,
        "Workers fire due recurring jobs (every worker takes part; each slot fires once).",
    )
)
POLL_INTERVAL = register_key(
    RatchetConfigKey(
        "recurring.poll_interval",
        parse_duration,
        timedelta(seconds=1),
        "How often each worker looks for due recurring definitions (seconds or a duration).",
    )
)
MISFIRE_GRACE = register_key(
    RatchetConfigKey(
        "recurring.misfire_grace",
        parse_duration,
        timedelta(seconds=60),
        "A slot fired later than this after its time is a misfire and follows the "
        "definition's misfire policy (skip, fire_once, fire_all).",
    )
)
MAX_CATCH_UP = register_key(
    RatchetConfigKey(
        "recurring.max_catch_up",
        parse_int(1, 100_000),
        100,
        "Most missed slots one definition fires at once under the fire_all misfire policy "
        "(oldest first; the rest are skipped).",
    )
)
BATCH_SIZE = register_key(
    RatchetConfigKey(
        "recurring.batch_size",
        parse_int(1, 100_000),
        500,
        "Due definitions read per store query by the recurring sweep.",
    )
)
MODULES: RatchetConfigKey[tuple[str, ...]] = register_key(
    RatchetConfigKey(
        "recurring.modules",
        parse_str_list,
        (),
        "Comma separated modules a worker imports when it starts, so that their @recurring "
        "functions are declared (modules the application imports anyway need no listing).",
    )
)
DEFINITIONS = register_key(
    RatchetConfigKey(
        "recurring",
        parse_str,
        "",
        "Recurring jobs declared in configuration, created or updated when a worker starts: a "
        "list of tables (id, cron or every, target, args, kwargs, tz, misfire, job options); "
        "[[ratchet.recurring]] in ratchet.toml, RATCHET['recurring'] in Django, "
        "RATCHET_RECURRING in Flask, JSON in the environment. See recurring.md.",
    )
)


@attrs.frozen(kw_only=True)
class RecurringSettings:
    enabled: bool = True
    poll_interval: timedelta = timedelta(seconds=1)
    misfire_grace: timedelta = timedelta(seconds=60)
    max_catch_up: int = 100
    batch_size: int = 500

    @classmethod
    def from_config(cls, config: RatchetConfig) -> RecurringSettings:
        return cls(
            enabled=config.get(ENABLED),
            poll_interval=config.get(POLL_INTERVAL),
            misfire_grace=config.get(MISFIRE_GRACE),
            max_catch_up=config.get(MAX_CATCH_UP),
            batch_size=config.get(BATCH_SIZE),
        )


__all__ = [
    "BATCH_SIZE",
    "DEFINITIONS",
    "ENABLED",
    "MAX_CATCH_UP",
    "MISFIRE_GRACE",
    "MODULES",
    "POLL_INTERVAL",
    "RecurringSettings",
]
