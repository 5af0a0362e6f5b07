"""The optional capabilities of the SQL store, one module each: recurring, batch, workflow
conditions, signals, resource permits, flow control, locks, archive, query, analytics, queue statistics, audit
and extension properties/state."""

from ratchet_store_sql._capabilities.analytics import AnalyticsOperations
from ratchet_store_sql._capabilities.archive import ArchiveOperations
from ratchet_store_sql._capabilities.audit import AuditOperations
from ratchet_store_sql._capabilities.batch import BatchOperations
from ratchet_store_sql._capabilities.extension import ExtensionOperations
from ratchet_store_sql._capabilities.flow_control import FlowControlOperations
from ratchet_store_sql._capabilities.history import HistoryOperations
from ratchet_store_sql._capabilities.lock import LockOperations
from ratchet_store_sql._capabilities.permit import PermitOperations
from ratchet_store_sql._capabilities.query import QueryOperations
from ratchet_store_sql._capabilities.queues import QueueStatsOperations
from ratchet_store_sql._capabilities.recurring import RecurringOperations
from ratchet_store_sql._capabilities.signal import SignalOperations
from ratchet_store_sql._capabilities.worker_batch import WorkerBatchOperations
from ratchet_store_sql._capabilities.workflow import WorkflowOperations

__all__ = [
    "AnalyticsOperations",
    "ArchiveOperations",
    "AuditOperations",
    "BatchOperations",
    "ExtensionOperations",
    "FlowControlOperations",
    "HistoryOperations",
    "LockOperations",
    "PermitOperations",
    "QueryOperations",
    "QueueStatsOperations",
    "RecurringOperations",
    "SignalOperations",
    "WorkerBatchOperations",
    "WorkflowOperations",
]
