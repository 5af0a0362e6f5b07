"""Table aliases shared by the capability modules."""

from __future__ import annotations

from ratchet_api.model import TERMINAL_STATUSES
from ratchet_store_sql import schema as s

J = s.jobs
T = s.job_tags
P = s.job_properties
ST = s.job_state
A = s.archived_jobs
TERMINAL = sorted(x.value for x in TERMINAL_STATUSES)

__all__ = ["TERMINAL", "A", "J", "P", "ST", "T"]
