"""The payload chain: how a job's values are serialized, limited, sealed (codec, envelope,
encryption, keys, rotation) and shown (masking, the readable detail view).

``ratchet_core.payload`` was a module before 0.3 (the stored text forms of an
invocation and a backoff policy); its names are served from :mod:`ratchet_core.payload.forms`.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    module = importlib.import_module("ratchet_core.payload.forms")
    try:
        value = getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module 'ratchet_core.payload' has no attribute {name!r}") from None
    warnings.warn(
        f"ratchet_core.payload.{name} moved to ratchet_core.payload.forms.{name}",
        DeprecationWarning,
        stacklevel=2,
    )
    return value
