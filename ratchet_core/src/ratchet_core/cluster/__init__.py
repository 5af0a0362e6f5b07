"""Cluster coordination: startup leases, wake-ups between nodes and the coordinator that
``cluster.backend`` selects.

``ratchet_core.cluster`` was a module before 0.3; its names are served from
:mod:`ratchet_core.cluster.coordination`.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    module = importlib.import_module("ratchet_core.cluster.coordination")
    try:
        value = getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module 'ratchet_core.cluster' has no attribute {name!r}") from None
    warnings.warn(
        f"ratchet_core.cluster.{name} moved to ratchet_core.cluster.coordination.{name}",
        DeprecationWarning,
        stacklevel=2,
    )
    return value
