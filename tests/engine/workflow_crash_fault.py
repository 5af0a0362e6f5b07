"""Fault injection for the workflow crash test, loaded into a worker process through the
``alternatives.modules`` setting: settling children stalls forever after touching the file named
by ``RATCHET_TEST_STALL_MARKER``. The worker has then written its parent's success but released
none of its children, which is the window the test kills the process in (SIGKILL)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any
from uuid import UUID

from ratchet_core.features.workflow.settle import WorkflowSettler

_marker = os.environ.get("RATCHET_TEST_STALL_MARKER")


def _stall(self: WorkflowSettler, parent_id: UUID, *_: Any) -> Any:
    if _marker:
        Path(_marker).write_text(str(parent_id))
    threading.Event().wait()  # until the process is killed


if _marker:
    WorkflowSettler.settle = _stall  # type: ignore[method-assign]
