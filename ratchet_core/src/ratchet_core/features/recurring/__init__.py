"""Recurring jobs: cron schedules with time zones and misfire policies, fired exactly once per
slot by every worker of a cluster together (no separate beat process). See docs/recurring.md.

* :func:`recurring` - the decorator declaring a module-level function as a recurring job;
* :class:`RecurringService` - ``scheduler.recurring_jobs``: declare, get, list, pause, resume,
  delete, trigger_now;
* :class:`RecurringSweeper` - the part of each worker that fires due definitions.
"""

from ratchet_core.features.recurring.declarations import recurring
from ratchet_core.features.recurring.schedule import parse_schedule
from ratchet_core.features.recurring.service import RecurringOptions, RecurringService
from ratchet_core.features.recurring.sweeper import RecurringSweeper

__all__ = [
    "RecurringOptions",
    "RecurringService",
    "RecurringSweeper",
    "parse_schedule",
    "recurring",
]
