"""Two alternatives with the same priority for one SPI: a deployment error (system check)."""

from __future__ import annotations

from ratchet_api.priority import Priority
from ratchet_api.spi import RetryPolicy
from ratchet_core.defaults.retry import DefaultRetryPolicy
from ratchet_core.runtime.alternatives import alternative


@alternative(RetryPolicy, priority=Priority.APPLICATION)
class FirstRetryPolicy(DefaultRetryPolicy):
    pass


@alternative(RetryPolicy, priority=Priority.APPLICATION)
class SecondRetryPolicy(DefaultRetryPolicy):
    pass
