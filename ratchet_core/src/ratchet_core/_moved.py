"""Old import paths of modules that moved when ratchet_core was laid out by role.

Until release 0.3 the engine's modules sat on one floor (``ratchet_core.scheduler``,
``ratchet_core.codec``, ``ratchet_core.recurring`` ...). They now live in folders named for their
role (``ratchet_core.enqueue.scheduler``, ``ratchet_core.payload.codec``,
``ratchet_core.features.recurring``). An import of an old path still works: this finder hands back
the module at its new path (the same module object, so ``isinstance`` checks and monkeypatching
agree) and emits a :class:`DeprecationWarning` naming the new path. The public paths
(``from ratchet_core import RatchetContainer``, ``ratchet_core.contrib.*``) never moved.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

#: old module (relative to ``ratchet_core``) -> new module (relative to ``ratchet_core``)
MOVED: dict[str, str] = {
    "scheduler": "enqueue.scheduler",
    "pipeline": "enqueue.pipeline",
    "submitter": "enqueue.submitter",
    "options": "enqueue.options",
    "builder": "enqueue.builder",
    "bulk": "enqueue.bulk",
    "invocation": "enqueue.invocation",
    "targets": "enqueue.targets",
    "properties": "enqueue.properties",
    "serialization": "payload.serialization",
    "codec": "payload.codec",
    "envelope": "payload.envelope",
    "encryption": "payload.encryption",
    "keys": "payload.keys",
    "rotation": "payload.rotation",
    "masking": "payload.masking",
    "limits": "payload.limits",
    "detail": "payload.detail",
    "retry": "worker.retry",
    "context": "worker.context",
    "cluster_backend": "cluster.backend",
    "cluster_sqlite": "cluster.sqlite",
    "recurring": "features.recurring",
    "workflow": "features.workflow",
    "batches": "features.batches",
    "streaming": "features.streaming",
    "flow_control": "features.flow_control",
    "retention": "features.retention",
    "metrics": "observability.metrics",
    "metrics_backend": "defaults.metrics",
    "tracing": "observability.tracing",
    "logs": "observability.logs",
    "health": "observability.health",
    "container": "runtime.container",
    "config": "runtime.config",
    "alternatives": "runtime.alternatives",
    "conformance": "runtime.conformance",
    "bindings": "runtime.bindings",
    "stores": "runtime.stores",
    "store_compat": "runtime.store_compat",
    "process_signals": "runtime.process_signals",
    "beans": "defaults.beans",
    "authorization": "defaults.authorization",
    "transactions": "defaults.transactions",
    "submission": "defaults.submission",
    "resilience": "defaults.resilience",
}
# ``ratchet_core.cluster`` and ``ratchet_core.payload`` are folders now; their old modules'
# names are served by the folders' ``__getattr__`` (``cluster.coordination``, ``payload.forms``).

_PREFIX = "ratchet_core."


def new_name(fullname: str) -> str | None:
    """The module path that replaced ``fullname``, or ``None`` when it did not move."""
    if not fullname.startswith(_PREFIX):
        return None
    rest = fullname[len(_PREFIX) :]
    head, dot, tail = rest.partition(".")
    moved = MOVED.get(head)
    if moved is None:
        return None
    return f"{_PREFIX}{moved}{dot}{tail}"


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self._target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name} moved to {self._target}; import it from there",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(self._target)

    def exec_module(self, module: ModuleType) -> None:
        return None


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Resolves the pre-0.3 module paths of ratchet_core to the modules' new paths."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        new = new_name(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(new))


def forwarder(folder: str, module: str) -> Callable[[str], Any]:
    """The module ``__getattr__`` of a folder that was a module before 0.3
    (``ratchet_core.payload``, ``ratchet_core.cluster``): a name of the old module is served from
    ``ratchet_core.<folder>.<module>``, with a ``DeprecationWarning`` naming where it is now."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        target = f"{_PREFIX}{folder}.{module}"
        try:
            value = getattr(importlib.import_module(target), name)
        except AttributeError:
            raise AttributeError(f"module '{_PREFIX}{folder}' has no attribute {name!r}") from None
        warnings.warn(
            f"{_PREFIX}{folder}.{name} moved to {target}.{name}", DeprecationWarning, stacklevel=2
        )
        return value

    return __getattr__


def install() -> None:
    """Put the finder on ``sys.meta_path`` once."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        # first: a submodule of an aliased package (ratchet_core.recurring.service) would
        # otherwise be found again by the path finder under its old name, as a second copy
        sys.meta_path.insert(0, MovedModuleFinder())
